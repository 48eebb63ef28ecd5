"""Large memory: a 1 GiB NumPy array and a 1 GiB torch tensor register, and a sub-range of the
registered array is a cache hit."""
import numpy
import pytest
import torch

import hmr

GIB = 1 << 30


def available_bytes():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


needs_memory = pytest.mark.skipif(available_bytes() < 4 * GIB,
                                  reason="less than 4 GiB of memory available")


@needs_memory
def test_one_gib_numpy_array(domain):
    array = numpy.ones(GIB, dtype=numpy.uint8)
    with domain.register(array) as region:
        assert region.length == GIB
        with domain.register(array, offset=GIB // 2, length=4096) as part:
            assert part.key == region.key
        assert domain.stats()["cache_hits"] == 1
        assert domain.stats()["mr_bytes"] == GIB
    del array


@needs_memory
def test_one_gib_torch_tensor(domain):
    tensor = torch.ones(GIB // 4, dtype=torch.float32)
    with domain.register(tensor) as region:
        assert region.length == GIB and region.address == tensor.data_ptr()
