"""examples/python/kv_cache_pool.py runs and verifies its bytes (on CUDA where torch sees a
GPU, on the host otherwise; --cpu forces the host path)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "kv_cache_pool.py"


@pytest.mark.parametrize("args", [["--cpu"], []], ids=["cpu", "default-device"])
def test_kv_cache_pool(args):
    if not args and not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False: the default device is the CPU, "
                    "run already")
    out = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified" in out.stdout
