"""What a review of the package found (nineteenth session), each a test that failed or crashed
before its fix: calls racing Domain.close() on other threads, reasons cut inside a UTF-8
character, DLPack deleters run with an error set, lengths that wrapped round, and errors of
other kinds escaping where hmr.Error belongs.  Run with Debian's interpreter (conftest.py)."""
import ctypes
import threading
import time

import numpy
import pytest
import torch

import hmr


# A DLPack producer made with ctypes, whose deleter is Python code (as any producer written in
# Python has): a deleter run while an error is set raised SystemError instead of the error.
class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_deleted = []


@_DELETER
def _python_deleter(managed):
    _deleted.append(ctypes.addressof(managed.contents))


class DLPackProducer:
    """A CPU DLPack tensor over `buffer` with the given shape, element bits and lanes."""

    def __init__(self, buffer, shape, bits=8, lanes=1):
        self.buffer = buffer
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.managed = _Managed()
        t = self.managed.dl_tensor
        t.data = ctypes.addressof(buffer)
        t.device = _Device(1, 0)  # kDLCPU
        t.ndim = len(shape)
        t.dtype = _DataType(1, bits, lanes)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        self.managed.deleter = _python_deleter

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)


def test_a_domain_closed_while_other_threads_query_or_flush_it_waits_for_them():
    # Domain.md_query and cache_flush let go of the GIL without counting themselves, so
    # close() freed the domain under them (a segfault within a few hundred rounds).
    arrays = [numpy.zeros(16384, numpy.uint8) for _ in range(50)]
    for call in ("md_query", "cache_flush"):
        outcomes = {"closed": 0, "busy": 0}
        for _ in range(100):
            domain = hmr.Domain("sim")
            for array in arrays:
                domain.register(array).close()  # idle cached entries for the flush
            started = threading.Event()

            def work():
                started.set()
                try:
                    getattr(domain, call)(**({"reg_cost": True} if call == "md_query" else {}))
                except hmr.ClosedError:
                    pass

            worker = threading.Thread(target=work)
            worker.start()
            started.wait()
            try:
                domain.close()
                outcomes["closed"] += 1
            except hmr.BusyError:
                outcomes["busy"] += 1
            worker.join()
            domain.close()
            assert domain.closed
        assert outcomes["closed"] + outcomes["busy"] == 100


def test_a_register_whose_object_runs_python_code_while_the_domain_closes_finds_it_closed():
    # Reading an object runs its Python code (here __dlpack__), which lets another thread
    # close the domain in the meantime: the register then used the freed domain's handle.
    buffer = ctypes.create_string_buffer(4096)
    inside = threading.Event()
    closed = threading.Event()

    class Blocking(DLPackProducer):
        def __dlpack__(self, stream=None):
            inside.set()
            closed.wait(10)
            return super().__dlpack__(stream)

    domain = hmr.Domain("sim")
    outcome = []

    def register():
        try:
            domain.register(Blocking(buffer, (4096,))).close()
            outcome.append("registered")
        except hmr.Error as error:
            outcome.append(type(error).__name__)

    worker = threading.Thread(target=register)
    worker.start()
    assert inside.wait(10)
    domain.close()  # the register has not started its call: nothing to wait for
    closed.set()
    worker.join()
    assert outcome == ["ClosedError"]


def test_a_reason_cut_inside_a_utf8_character_is_still_an_hmr_error():
    nameless = type("é" * 300, (), {})()  # its type's name goes into the reason, cut at 512 bytes
    with pytest.raises(hmr.Error):
        hmr.Domain("sim").register(nameless)


def test_a_python_dlpack_deleter_runs_without_the_error_and_the_error_survives():
    buffer = ctypes.create_string_buffer(10)
    with hmr.Domain("sim") as domain:
        before = len(_deleted)
        with pytest.raises(hmr.InvalidArgumentError, match="past"):
            domain.register(DLPackProducer(buffer, (10,)), offset=11)
        assert len(_deleted) == before + 1  # released once, on the error path


def test_dlpack_sizes_that_wrap_round_or_are_negative_are_refused():
    buffer = ctypes.create_string_buffer(64)
    with hmr.Domain("sim") as domain:
        with pytest.raises(hmr.InvalidArgumentError, match="more "):
            domain.register(DLPackProducer(buffer, (1 << 62, 8)))
        with pytest.raises(hmr.InvalidArgumentError, match="negative"):
            domain.register(DLPackProducer(buffer, (-4,)))
        # Sub-byte elements are packed (DLPack 1.1's 4-bit floats): 100 of them take 50 bytes.
        with domain.register(DLPackProducer(buffer, (100,), bits=4)) as region:
            assert region.length == 50


class CudaArrayInterface:
    def __init__(self, address, shape, typestr="<f8"):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": shape,
                                         "typestr": typestr, "version": 3}


def test_cuda_array_interface_sizes_that_wrap_round_are_refused():
    with hmr.Domain("sim") as domain:
        for obj, reason in ((CudaArrayInterface(4096, ((1 << 61) + 1,)), "64-bit"),
                            (CudaArrayInterface(-4096, (4,)), "64-bit"),
                            (CudaArrayInterface(4096, (-4,)), "negative"),
                            (CudaArrayInterface(4096, (4,), typestr="<f0"), "item size")):
            with pytest.raises(hmr.InvalidArgumentError, match=reason):
                domain.register(obj)


def test_negative_numbers_and_producers_errors_are_hmr_errors():
    data = bytearray(64)
    with hmr.Domain("sim") as domain:
        with pytest.raises(hmr.InvalidArgumentError):
            domain.register(data, offset=-1)
        with pytest.raises(hmr.InvalidArgumentError):
            domain.register(data, length=-1)
        with domain.register(data) as region:
            with pytest.raises(hmr.InvalidArgumentError):
                region.sync(hmr.SYNC_TO_DEVICE, length=-1)
        # torch refuses to export a tensor that needs grad: hmr says so, with torch's error
        # as the cause.
        tensor = torch.zeros(4, 4, requires_grad=True).t()  # permuted: exported by DLPack
        with pytest.raises(hmr.InvalidArgumentError, match="__dlpack__") as caught:
            domain.register(tensor)
        assert isinstance(caught.value.__cause__, RuntimeError)


def test_an_endpoint_given_a_closed_region_says_it_is_closed():
    data = bytearray(4096)
    with hmr.Domain("sim") as domain, domain.endpoint() as endpoint:
        region = domain.register(data)
        region.close()
        with pytest.raises(hmr.ClosedError):
            endpoint.write(region, 0, 0)


def test_strerror_of_a_code_over_32_bits_is_unknown():
    assert hmr.strerror(2**32 + 22) == "unknown error"
    assert hmr.strerror(22) == "invalid argument"
