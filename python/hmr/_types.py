"""hmr.Pointer and hmr.MemoryInfo: plain Python classes the C extension reads and builds."""
from __future__ import annotations

from typing import Any, NamedTuple


class Pointer:
    """Raw memory for Domain.register and hmr.query: ``length`` bytes at ``address``, which
    stays valid as long as ``keepalive`` (any object, or None) lives.  A region registered
    from a Pointer keeps the Pointer, and so ``keepalive``, alive until it is closed."""

    __slots__ = ("address", "length", "keepalive")

    def __init__(self, address: int, length: int, keepalive: Any = None) -> None:
        if address < 0 or length < 0:
            raise ValueError("address and length must not be negative")
        self.address = int(address)
        self.length = int(length)
        self.keepalive = keepalive

    def __repr__(self) -> str:
        return f"hmr.Pointer(address={self.address:#x}, length={self.length})"


class MemoryInfo(NamedTuple):
    """What a range of memory is (hmr.query, hmr_mem_query)."""

    iface: str
    """The runtime that owns it: "system", "cuda", "rocr", "ze", "neuron", "synapseai"."""
    kind: str
    """"host", "host_alloc", "device_only" or "managed"."""
    device: int
    """CUDA ordinal, Level Zero encoding, ...; 0 for host memory."""
    base: int
    """Start of the allocation holding the range (host memory: its first page)."""
    alloc_len: int
    """Bytes of that allocation (host memory: the pages covering the range)."""
    alloc_id: int
    """Changes when the address is freed and reused; 0 for host memory."""
