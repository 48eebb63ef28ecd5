"""Shared fixtures of the hmr Python tests.  Run with Debian's interpreter, which has numpy,
torch and pytest:  PYTHONPATH=<build>/python /usr/bin/python3 -m pytest tests/python
(ctest's hmr_python_tests does exactly that)."""
import re
from pathlib import Path

import pytest

import hmr

SOURCE_TREE = Path(__file__).resolve().parents[2]
HEADER = SOURCE_TREE / "include" / "hmr" / "hmr.h"


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
