"""hmr for Python: register NumPy arrays, PyTorch tensors and any buffer-protocol, DLPack or
CUDA-array object with an RDMA NIC through hmr (heterogeneous memory registration), at close
to C speed.  docs/python.md is the guide.

    import hmr, numpy
    with hmr.Domain("sim") as domain:
        array = numpy.zeros(1 << 20, dtype=numpy.uint8)
        with domain.register(array) as region:
            blob = region.pack_rkey()      # what a peer needs: address, length, key

One extension module (hmr._hmr, CPython's stable ABI from 3.11) over the libhmr it was built
with.  Threads may register concurrently; see docs/python.md for the GIL and fork."""
from __future__ import annotations

from ._errors import (AccessError, BusyError, ClosedError, Error, InvalidArgumentError,
                      NotSupportedError, ResourceError)
from ._types import MemoryInfo, Pointer
from ._hmr import (COLLECTIVE, KEY_NOTAVAIL, MR_ALLOCATED, MR_BASIC, MR_COLLECTIVE,
                   MR_ENDPOINT, MR_HMEM, MR_LOCAL, MR_MMU_NOTIFY, MR_PROV_KEY, MR_RAW,
                   MR_RMA_EVENT, MR_SCALABLE, MR_UNSPEC, MR_VIRT_ADDR, READ, RECV,
                   REMOTE_READ, REMOTE_WRITE, SEND, SYNC_FROM_DEVICE, SYNC_TO_DEVICE, WRITE,
                   Domain, Endpoint, MemoryRegion,
                   RemoteKey, __version__, query, strerror)

__all__ = [
    "Domain", "MemoryRegion", "RemoteKey", "Endpoint", "Pointer", "MemoryInfo", "query",
    "strerror", "Error", "InvalidArgumentError", "AccessError", "BusyError", "ClosedError",
    "NotSupportedError", "ResourceError", "READ", "WRITE", "REMOTE_READ", "REMOTE_WRITE",
    "SEND", "RECV", "COLLECTIVE", "SYNC_TO_DEVICE", "SYNC_FROM_DEVICE", "KEY_NOTAVAIL",
    "MR_UNSPEC", "MR_BASIC", "MR_SCALABLE",
    "MR_LOCAL", "MR_RAW", "MR_VIRT_ADDR", "MR_ALLOCATED", "MR_PROV_KEY", "MR_MMU_NOTIFY",
    "MR_RMA_EVENT", "MR_ENDPOINT", "MR_HMEM", "MR_COLLECTIVE", "__version__",
]
