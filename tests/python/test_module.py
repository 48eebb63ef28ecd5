"""Module-level entry points: constants against hmr.h, the version, strerror, query."""
import errno

import numpy
import pytest

import hmr
from conftest import header_defines, header_text


def test_access_and_mr_mode_constants_match_the_header():
    defines = header_defines("")
    for name in ("READ", "WRITE", "REMOTE_READ", "REMOTE_WRITE", "SEND", "RECV",
                 "COLLECTIVE", "SYNC_TO_DEVICE", "SYNC_FROM_DEVICE"):
        assert getattr(hmr, name) == defines[name], name
    mr_bits = {k: v for k, v in header_defines("MR_").items()
               if k in ("MR_UNSPEC", "MR_BASIC", "MR_SCALABLE", "MR_LOCAL", "MR_RAW",
                        "MR_VIRT_ADDR", "MR_ALLOCATED", "MR_PROV_KEY", "MR_MMU_NOTIFY",
                        "MR_RMA_EVENT", "MR_ENDPOINT", "MR_HMEM", "MR_COLLECTIVE")}
    assert len(mr_bits) == 13
    for name, value in mr_bits.items():
        assert getattr(hmr, name) == value, name


def test_version_is_the_librarys():
    major = int(header_text().split("#define HMR_VERSION_MAJOR ")[1].split()[0])
    minor = int(header_text().split("#define HMR_VERSION_MINOR ")[1].split()[0])
    patch = int(header_text().split("#define HMR_VERSION_PATCH ")[1].split()[0])
    assert hmr.__version__ == f"{major}.{minor}.{patch}"


def test_strerror():
    assert hmr.strerror(errno.EINVAL)
    assert hmr.strerror(-errno.EINVAL) == hmr.strerror(errno.EINVAL)


def test_query_of_host_memory():
    array = numpy.zeros(3 * 4096, dtype=numpy.uint8)
    info = hmr.query(array)
    assert isinstance(info, hmr.MemoryInfo)
    assert info.iface == "system" and info.kind == "host" and info.device == 0
    assert info.base <= array.ctypes.data
    assert info.base + info.alloc_len >= array.ctypes.data + array.nbytes
    assert info.alloc_id == 0
    assert hmr.query(bytearray(10)).iface == "system"
    assert hmr.query(hmr.Pointer(array.ctypes.data, 100)).iface == "system"


def test_query_of_an_object_without_memory():
    with pytest.raises(hmr.InvalidArgumentError, match="exposes no memory") as caught:
        hmr.query(object())
    assert caught.value.code == errno.EINVAL


def test_error_carries_code_and_reason():
    with pytest.raises(hmr.Error) as caught:
        hmr.Domain("no-such-nic")
    error = caught.value
    assert error.code == errno.ENODEV
    assert isinstance(error, hmr.NotSupportedError)
    assert error.reason and error.reason in str(error)


def test_pointer_rejects_negative():
    with pytest.raises(ValueError):
        hmr.Pointer(-1, 10)


def test_everything_in_all_exists():
    for name in hmr.__all__:
        assert hasattr(hmr, name), name


def test_errors_survive_pickling():
    # What a worker process raises reaches its parent (multiprocessing, concurrent.futures)
    # as the same error: args held only the message, and unpickling called Error(message).
    import pickle
    with hmr.Domain("sim") as domain:
        with pytest.raises(hmr.Error) as caught:
            domain.register(memoryview(bytearray(100))[::2])
    caught.value.add_note("a note the worker added")
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.__notes__ == ["a note the worker added"]
    assert type(again) is type(caught.value)
    assert (again.code, again.reason, str(again)) == (caught.value.code, caught.value.reason,
                                                      str(caught.value))
