"""Device memory through the package without a GPU: fake_cuda_child.py, in a process of its
own, loads the project's fake CUDA driver (HMR_CUDA_LIBRARY; ctest passes its path as
HMR_FAKE_CUDA_PATH) and registers CUDA memory through the host shadow (a peer's reads and writes,
MemoryRegion.sync both ways, bad arguments), without allow_hmem_copy (refused, with why), and
through the dma-buf path.  A process of its own because the driver a process uses is chosen
when hmr first loads it.  The same on a real GPU: test_torch_dlpack.py's CUDA tests."""
import os
from pathlib import Path

import pytest

from conftest import run_child

FAKE = os.environ.get("HMR_FAKE_CUDA_PATH")


@pytest.mark.skipif(not FAKE or not os.path.exists(FAKE),
                    reason="HMR_FAKE_CUDA_PATH names no fake CUDA driver (ctest's "
                           "hmr_python_tests sets it to the build's tests/fakes/cuda/libcuda.so.1)")
def test_cuda_memory_on_the_fake_driver():
    run_child([str(Path(__file__).with_name("fake_cuda_child.py"))], HMR_CUDA_LIBRARY=FAKE)
