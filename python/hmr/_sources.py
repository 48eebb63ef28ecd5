"""The parts of reading an object's memory that are plain Python (the C extension calls them
on its slow path)."""
from __future__ import annotations

import math
from typing import Any

from ._errors import InvalidArgumentError

_EINVAL = 22


def _invalid(reason: str) -> InvalidArgumentError:
    return InvalidArgumentError(_EINVAL, reason, f"hmr (the object's memory): Invalid argument ({reason})")


def cuda_array_interface(obj: Any) -> tuple[int, int, bool]:
    """(address, length, readonly) of an object with ``__cuda_array_interface__`` (version 3
    and earlier: https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html).
    The memory must be one contiguous range; a mask is refused."""
    cai = obj.__cuda_array_interface__
    try:
        address, readonly = cai["data"]
        shape = tuple(int(n) for n in cai["shape"])
        typestr = cai["typestr"]
        strides = cai.get("strides")
    except (KeyError, TypeError, ValueError) as e:
        raise _invalid(f"__cuda_array_interface__ is malformed: {e!r}") from None
    if cai.get("mask") is not None:
        raise _invalid("__cuda_array_interface__ with a mask is not one range of memory")
    try:
        itemsize = int(typestr[2:])
    except (TypeError, ValueError):
        raise _invalid(f"__cuda_array_interface__ typestr {typestr!r} has no item size") from None
    if itemsize <= 0:
        raise _invalid(f"__cuda_array_interface__ typestr {typestr!r} has no item size")
    if any(n < 0 for n in shape):
        raise _invalid(f"__cuda_array_interface__ shape {shape} has a negative dimension")
    if strides is not None and len(strides) != len(shape):
        raise _invalid(f"__cuda_array_interface__ strides {tuple(strides)} do not match shape "
                       f"{shape}")
    elements = math.prod(shape)
    if strides is not None and elements > 1:
        dims = sorted((s, n) for s, n in zip(strides, shape) if n != 1)
        expected = itemsize
        for stride, n in dims:
            if stride != expected:
                raise _invalid("__cuda_array_interface__ memory is not contiguous (strides "
                               f"{tuple(strides)} for shape {shape})")
            expected *= n
    if address is None:
        address = 0
    address = int(address)
    length = elements * itemsize
    # (C parses these as 64-bit numbers: anything larger, or negative, would wrap round.)
    if address < 0 or length >= 1 << 64 or address + length > 1 << 64:
        raise _invalid(f"__cuda_array_interface__ memory [{address:#x}, +{length}) is not in a "
                       "64-bit address space")
    return address, length, bool(readonly)
