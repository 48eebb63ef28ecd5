"""PyTorch tensors (data_ptr route), DLPack producers (__dlpack__, with the capsule's deleter
called exactly once at close) and __cuda_array_interface__ objects; CUDA when torch sees a
GPU."""
import ctypes
import errno
import gc
import weakref

import numpy
import pytest
import torch

import hmr
from test_review_findings import _DataType, _Device, _Tensor, _capsule_new

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="torch.cuda.is_available() is False: no GPU "
                                "on this machine (the GPU lane runs these)")


def test_cpu_tensor(domain):
    tensor = torch.arange(1000, dtype=torch.float64)
    with domain.register(tensor) as region:
        assert region.address == tensor.data_ptr()
        assert region.length == tensor.numel() * tensor.element_size()
        assert region.iface == "system"
        assert region.obj is tensor


def test_tensor_view_with_storage_offset(domain):
    base = torch.zeros(1000, dtype=torch.int32)
    view = base[10:110]
    with domain.register(view) as region:
        assert region.address == base.data_ptr() + 40
        assert region.length == 400


def test_non_contiguous_tensor_is_refused(domain):
    tensor = torch.zeros(64, 64)
    with pytest.raises(hmr.InvalidArgumentError, match="not contiguous") as caught:
        domain.register(tensor[:, ::2])
    assert caught.value.code == errno.EINVAL


def test_dense_permuted_tensor_registers_through_dlpack(domain):
    tensor = torch.zeros(16, 32).t()  # dense, Fortran order: is_contiguous() is False
    assert not tensor.is_contiguous()
    with domain.register(tensor) as region:
        assert region.address == tensor.data_ptr()
        assert region.length == 16 * 32 * 4


def test_tensor_kept_alive_until_close(domain):
    tensor = torch.zeros(1 << 16)
    ref = weakref.ref(tensor)
    region = domain.register(tensor)
    del tensor
    gc.collect()
    assert ref() is not None
    region.close()
    gc.collect()
    assert ref() is None


class DLPackOnly:
    """A producer with nothing but __dlpack__ (as CuPy or JAX arrays look to hmr); counts the
    capsules it made and sees them freed through torch's deleter."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.capsules = 0

    def __dlpack__(self, stream=None):
        self.capsules += 1
        return torch.utils.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self):
        return (1, 0)


def test_dlpack_producer_and_deleter(domain):
    tensor = torch.arange(4096, dtype=torch.uint8)
    producer = DLPackOnly(tensor)
    producer_ref = weakref.ref(producer)
    region = domain.register(producer)
    assert producer.capsules == 1
    assert region.address == tensor.data_ptr() and region.length == 4096
    assert region.obj is producer
    del producer
    gc.collect()
    assert producer_ref() is not None, "the region let go of the producer while registered"
    region.close()
    gc.collect()
    assert producer_ref() is None


def test_dlpack_deleter_runs_at_close_not_before(domain):
    tensor = torch.zeros(1024)
    producer = DLPackOnly(tensor)
    region = domain.register(producer)
    capsule_tensor = weakref.ref(tensor)
    del tensor
    producer.tensor = None
    gc.collect()
    assert capsule_tensor() is not None, "the DLPack tensor was freed while registered"
    region.close()
    gc.collect()
    assert capsule_tensor() is None, "close() did not call the DLPack deleter"


def test_dlpack_non_contiguous(domain):
    producer = DLPackOnly(torch.zeros(32, 32)[:, ::2])
    with pytest.raises(hmr.InvalidArgumentError, match="not contiguous"):
        domain.register(producer)


def test_dlpack_capsule_used_twice(domain):
    capsule = torch.utils.dlpack.to_dlpack(torch.zeros(16))

    class Stale:
        def __dlpack__(self, stream=None):
            return capsule

    domain.register(Stale()).close()
    with pytest.raises(hmr.InvalidArgumentError, match="dltensor"):
        domain.register(Stale())


class FakeCudaArray:
    """A __cuda_array_interface__ (v3) over host memory: hmr detects the memory itself, so the
    interface's parsing is tested without a GPU."""

    def __init__(self, array, readonly=False, strides=None, mask=None):
        self.array = array
        self.__cuda_array_interface__ = {
            "data": (array.ctypes.data, readonly), "shape": array.shape,
            "strides": strides, "typestr": array.dtype.str, "version": 3, "mask": mask,
        }


def test_cuda_array_interface(domain):
    array = numpy.zeros((32, 16), dtype=numpy.float32)
    with domain.register(FakeCudaArray(array)) as region:
        assert region.address == array.ctypes.data and region.length == array.nbytes
    dense_strides = (4, 128)  # Fortran order over the same bytes
    with domain.register(FakeCudaArray(array, strides=dense_strides)) as region:
        assert region.length == array.nbytes


def test_cuda_array_interface_errors(domain):
    array = numpy.zeros((32, 16), dtype=numpy.float32)
    with pytest.raises(hmr.InvalidArgumentError, match="not contiguous"):
        domain.register(FakeCudaArray(array, strides=(128, 8)))
    with pytest.raises(hmr.AccessError, match="read-only"):
        domain.register(FakeCudaArray(array, readonly=True))
    domain.register(FakeCudaArray(array, readonly=True), hmr.REMOTE_READ).close()
    with pytest.raises(hmr.InvalidArgumentError, match="mask"):
        domain.register(FakeCudaArray(array, mask=object()))
    broken = FakeCudaArray(array)
    del broken.__cuda_array_interface__["typestr"]
    with pytest.raises(hmr.InvalidArgumentError, match="malformed"):
        domain.register(broken)
    # Fewer strides than dimensions: zip() cut them to size, and the rest went unchecked.
    with pytest.raises(hmr.InvalidArgumentError, match="do not match"):
        domain.register(FakeCudaArray(array, strides=(64,)))


@needs_cuda
def test_cuda_tensor():
    with hmr.Domain("sim", nic_options="dmabuf=1") as domain:
        tensor = torch.zeros(1 << 20, device="cuda")
        with domain.register(tensor) as region:
            assert region.iface == "cuda"
            assert region.device == tensor.device.index
            assert region.path in ("dmabuf", "peer_direct", "host_shadow")
        info = hmr.query(tensor)
        assert info.iface == "cuda" and info.kind == "device_only"


@needs_cuda
def test_cuda_tensor_through_a_host_shadow():
    """A NIC without GPUDirect (the software NIC told to import no dma-buf): the tensor is
    registered through a host shadow; a peer writes the shadow and sync() brings the bytes to
    the GPU, then the GPU's bytes go back to the shadow for the peer to read."""
    with hmr.Domain("sim", nic_options="dmabuf=0", allow_hmem_copy=True) as owner, \
            hmr.Domain("sim") as peer:
        tensor = torch.arange(1 << 20, dtype=torch.uint8, device="cuda")  # 0..255 repeated
        region = owner.register(tensor)
        assert (region.iface, region.path) == ("cuda", "host_shadow")
        assert region.remote_address == region.shadow != region.address
        target = owner.endpoint()
        with peer.unpack_rkey(region.pack_rkey()) as rkey, peer.endpoint() as ep:
            ep.connect(target)
            seen = bytearray(256)
            ep.read(seen, rkey.address + 4096, rkey.key)
            assert bytes(seen) == bytes(range(256))
            message = bytes(reversed(range(256))) * 4
            ep.write(message, rkey.address + 1000, rkey.key)
            region.sync(hmr.SYNC_TO_DEVICE, 1000, len(message))
            assert tensor[1000:1000 + len(message)].cpu().numpy().tobytes() == message
            tensor[500000:500016] = 7
            torch.cuda.synchronize()
            region.sync(hmr.SYNC_FROM_DEVICE, 500000, 16)
            back = bytearray(16)
            ep.read(back, rkey.address + 500000, rkey.key)
            assert bytes(back) == bytes([7]) * 16
        target.close()
        region.close()


@needs_cuda
def test_cuda_tensor_through_dlpack_and_cai():
    with hmr.Domain("sim") as domain:
        tensor = torch.zeros(1 << 20, device="cuda")
        with domain.register(DLPackOnly(tensor)) as region:
            assert region.iface == "cuda"

        class Cai:
            __cuda_array_interface__ = tensor.__cuda_array_interface__

        with domain.register(Cai()) as region:
            assert region.address == tensor.data_ptr()


# DLPack 1.0 through ctypes, as a producer that speaks it (NumPy 2, JAX, CuPy 13) hands it
# out: a "dltensor_versioned" capsule whose flags say whether the memory is read-only.  (The
# DLTensor, its device and dtype are test_review_findings' ctypes structs of DLPack 0.x.)
class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))
_DLManagedTensorVersioned._fields_ = [
    ("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
    ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]
_VERSIONED = b"dltensor_versioned"


class VersionedProducer:
    """__dlpack__(max_version=...) answered with a DLPack 1.x capsule over a NumPy array."""

    def __init__(self, array, read_only, version=(1, 0), copied=False):
        self.array = array
        self.deleted = 0
        self.asked = []
        self.shape = (ctypes.c_int64 * 1)(array.size)
        self.deleter = _Deleter(self._delete)
        self.managed = _DLManagedTensorVersioned()
        self.version = version
        self.managed.deleter = self.deleter
        self.managed.flags = (1 if read_only else 0) | (2 if copied else 0)
        tensor = self.managed.dl_tensor
        tensor.data = array.ctypes.data
        tensor.device = _Device(1, 0)
        tensor.ndim = 1
        tensor.dtype = _DataType(1, 8, 1)  # uint8
        tensor.shape = self.shape

    def _delete(self, managed):
        self.deleted += 1
        # As a producer's deleter frees the struct: what a consumer reads after is garbage.
        managed.contents.version = _DLPackVersion(0xDEAD, 0xBEEF)

    def __dlpack__(self, stream=None, max_version=None):
        self.asked.append(max_version)
        self.managed.version = _DLPackVersion(*self.version)  # (the last deleter scribbled)
        return _capsule_new(ctypes.addressof(self.managed), _VERSIONED, None)

    def __dlpack_device__(self):
        return (1, 0)


def test_dlpack_1_read_only_memory_is_not_registered_for_the_nic_to_write(domain):
    # Before, every DLPack tensor was taken for writable (the old capsule says nothing), and a
    # versioned capsule was refused outright.
    array = numpy.arange(4096, dtype=numpy.uint8)
    frozen = VersionedProducer(array, read_only=True)
    with pytest.raises(hmr.AccessError, match="read-only"):
        domain.register(frozen)  # REMOTE_WRITE by default
    assert frozen.asked == [(1, 0)] and frozen.deleted == 1
    with domain.register(frozen, hmr.REMOTE_READ) as region:
        assert region.address == array.ctypes.data and region.length == 4096
        assert frozen.deleted == 1, "the tensor was given back while registered"
    assert frozen.deleted == 2
    writable = VersionedProducer(array, read_only=False)
    with domain.register(writable) as region:
        assert region.length == 4096
    assert writable.deleted == 1


def test_dlpack_of_an_unknown_major_version_is_refused(domain):
    producer = VersionedProducer(numpy.zeros(64, numpy.uint8), read_only=False, version=(2, 0))
    with pytest.raises(hmr.InvalidArgumentError, match="version 2.0"):
        domain.register(producer)
    assert producer.deleted == 1


def test_dlpack_1_copy_is_not_registered_for_the_nic_to_write(domain):
    # IS_COPIED: the producer exported a copy; what the NIC writes there never reaches the
    # object.  Reading it is fine.
    producer = VersionedProducer(numpy.zeros(64, numpy.uint8), read_only=False, copied=True)
    with pytest.raises(hmr.InvalidArgumentError, match="IS_COPIED"):
        domain.register(producer)
    assert producer.deleted == 1
    domain.register(producer, hmr.REMOTE_READ).close()
    assert producer.deleted == 2
