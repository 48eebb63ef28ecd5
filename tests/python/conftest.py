"""Shared fixtures of the hmr Python tests.  Run with Debian's interpreter, which has numpy,
torch and pytest:  PYTHONPATH=<build>/python /usr/bin/python3 -m pytest tests/python
(ctest's hmr_python_tests does exactly that)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hmr

SOURCE_TREE = Path(__file__).resolve().parents[2]
HEADER = SOURCE_TREE / "include" / "hmr" / "hmr.h"


FAKE_IBVERBS = os.environ.get("HMR_FAKE_IBVERBS_PATH")
needs_fake_ibverbs = pytest.mark.skipif(
    not FAKE_IBVERBS or not os.path.exists(FAKE_IBVERBS),
    reason="HMR_FAKE_IBVERBS_PATH names no fake libibverbs (ctest's hmr_python_tests sets it "
           "to the build's tests/fakes/ibverbs/libibverbs.so.1)")


def run_child(args, **env):
    """Runs this interpreter with `args` in a process of its own, with `env` added to the
    environment (a vendor library a process uses is chosen when hmr first loads it), and
    fails the test unless it exits 0 with "ok" last on its output.  Its output."""
    run = subprocess.run([sys.executable, *args], env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
    return run.stdout


@pytest.fixture
def domain():
    with hmr.Domain("sim") as d:
        yield d


def header_text():
    return HEADER.read_text()


def header_struct_fields(struct):
    """Field names of `struct <struct> { ... };` in hmr.h, in order."""
    body = re.search(r"struct %s \{(.*?)\n\};" % struct, header_text(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return re.findall(r"^\s*[\w ]+?\s\**(\w+)(?:\[\w+\])?;", body, re.M)


def header_defines(prefix):
    """{name: value} of `#define HMR_<prefix>... (1ULL << n)` style constants."""
    out = {}
    for name, value in re.findall(r"#define HMR_(%s\w*) ([^/\n]+)" % prefix, header_text()):
        value = value.strip().replace("ULL", "")
        try:
            out[name] = eval(value, {})  # the header's own arithmetic: (1 << n), 0
        except Exception:
            pass
    return out


def pinning_sim(size, **options):
    """A software-NIC domain that pins host memory (nic_options "pins=1"), so that a
    registration of an untouched range of `size` bytes pre-faults it first and lasts long
    enough for another thread to get in: the timing checks of where the GIL is let go need a
    call that takes a while, and hmr pre-faults only for a NIC that pins.  Skipped where the
    process may not pin `size` bytes (RLIMIT_MEMLOCK without CAP_IPC_LOCK); those places are
    checked exactly, without timing, in test_gil_on_the_fake_nic.py."""
    domain = hmr.Domain("sim", nic_options="pins=1", **options)
    attr = domain.md_query()
    if attr["max_pinned_bytes_source"] in ("rlimit_memlock", "nic") and \
            attr["max_pinned_bytes"] < size:
        domain.close()
        pytest.skip(f"this process may pin only {attr['max_pinned_bytes']} bytes")
    return domain
