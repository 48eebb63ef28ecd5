"""Domain.register of buffer-protocol objects and hmr.Pointer; MemoryRegion's attributes and
lifetime; the errors the issue names (non-contiguous, read-only with REMOTE_WRITE, no
memory)."""
import array as pyarray
import ctypes
import errno
import gc
import mmap
import os
import weakref

import numpy
import pytest

import hmr


def registered_range(region):
    return region.address, region.length


@pytest.mark.parametrize("make", [
    lambda: bytearray(10000),
    lambda: memoryview(bytearray(10000))[100:5100],
    lambda: pyarray.array("d", range(1000)),
    lambda: numpy.arange(1000, dtype=numpy.float32),
    lambda: numpy.zeros((64, 32), dtype=numpy.int16, order="F"),
    lambda: mmap.mmap(-1, 3 * 4096),
], ids=["bytearray", "memoryview-slice", "array", "numpy", "numpy-fortran", "mmap"])
def test_buffer_objects_register(domain, make):
    obj = make()
    expected = memoryview(obj)
    with domain.register(obj) as region:
        assert region.length == expected.nbytes
        assert region.key != hmr.KEY_NOTAVAIL and isinstance(region.key, int)
        assert region.desc is None or isinstance(region.desc, int)
        assert region.iface == "system" and region.device == 0 and region.kind == "host"
        assert region.path == "address"
        assert region.access == hmr.REMOTE_READ | hmr.REMOTE_WRITE
        assert region.obj is obj or isinstance(obj, memoryview)
    assert region.closed
    expected.release()


def test_numpy_address_is_the_arrays(domain):
    array = numpy.zeros(1000, dtype=numpy.uint64)
    with domain.register(array) as region:
        assert registered_range(region) == (array.ctypes.data, array.nbytes)


def test_offset_and_length(domain):
    array = numpy.zeros(4096, dtype=numpy.uint8)
    with domain.register(array, hmr.REMOTE_READ, offset=100, length=200) as region:
        assert registered_range(region) == (array.ctypes.data + 100, 200)
    with domain.register(array, offset=4000) as region:
        assert region.length == 96
    with pytest.raises(hmr.InvalidArgumentError, match="past"):
        domain.register(array, offset=5000)
    with pytest.raises(hmr.InvalidArgumentError, match="past"):
        domain.register(array, offset=4000, length=97)


def test_access_keyword_and_bad_arguments(domain):
    data = bytearray(64)
    domain.register(data, access=hmr.READ | hmr.REMOTE_READ).close()
    with pytest.raises(TypeError):
        domain.register()
    with pytest.raises(TypeError):
        domain.register(data, hmr.READ, hmr.WRITE)
    with pytest.raises(TypeError):
        domain.register(data, hmr.READ, access=hmr.READ)
    with pytest.raises(TypeError):
        domain.register(data, colour="blue")
    with pytest.raises(hmr.InvalidArgumentError, match="0 to 2"):
        domain.register(data, access=-1)
    with pytest.raises(hmr.Error) as caught:  # hmr refuses access bits it does not know
        domain.register(data, access=1 << 62)
    assert caught.value.code == errno.EINVAL


def test_non_contiguous_is_refused(domain):
    array = numpy.zeros((64, 64), dtype=numpy.float32)
    with pytest.raises(hmr.InvalidArgumentError, match="not contiguous") as caught:
        domain.register(array[:, ::2])
    assert caught.value.code == errno.EINVAL
    with pytest.raises(hmr.InvalidArgumentError, match="not contiguous"):
        domain.register(memoryview(bytearray(100))[::2])


def test_read_only_buffer_with_remote_write_is_refused(domain):
    data = b"read-only bytes" * 100
    with pytest.raises(hmr.AccessError, match="read-only") as caught:
        domain.register(data)
    assert caught.value.code == errno.EACCES
    # The access bits under which the NIC writes the memory (fi_mr(3)): READ (an RDMA read's
    # result lands here), RECV, REMOTE_WRITE.  WRITE and SEND make it a source the NIC reads,
    # which read-only memory can be (the package asked for a writable export under WRITE and
    # took READ's read-only one: an RDMA read could then overwrite immutable bytes).
    for nic_writes in (hmr.READ, hmr.RECV, hmr.REMOTE_WRITE, hmr.READ | hmr.WRITE):
        with pytest.raises(hmr.AccessError, match="read-only"):
            domain.register(data, nic_writes)
    for nic_reads in (hmr.WRITE, hmr.SEND, hmr.REMOTE_READ, hmr.WRITE | hmr.SEND | hmr.REMOTE_READ):
        domain.register(data, nic_reads).close()
    frozen = numpy.zeros(100)
    frozen.flags.writeable = False
    with pytest.raises(hmr.AccessError):
        domain.register(frozen, hmr.REMOTE_WRITE)
    with domain.register(data, hmr.REMOTE_READ) as region:
        assert region.length == len(data)


@pytest.mark.parametrize("obj", [object(), 42, "text", [1, 2, 3], None])
def test_objects_without_memory_are_refused(domain, obj):
    with pytest.raises(hmr.InvalidArgumentError, match="exposes no memory") as caught:
        domain.register(obj)
    assert caught.value.code == errno.EINVAL


def test_pointer(domain):
    array = numpy.zeros(4096, dtype=numpy.uint8)
    pointer = hmr.Pointer(array.ctypes.data, array.nbytes, keepalive=array)
    with domain.register(pointer) as region:
        assert registered_range(region) == (array.ctypes.data, 4096)
        assert region.obj is pointer


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _unmapped_page_once(domain, libc):
    """Registers the middle page of three, lets the region go (the cache keeps it), unmaps
    that page and registers it again. Returns the error, or None when the registration
    succeeded while the page was unmapped; raises LookupError when another thread mapped
    something at the address first (then nothing can be concluded)."""
    page = 4096
    base = libc.mmap(None, 3 * page, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    middle = base + page
    try:
        with domain.register(hmr.Pointer(middle, page)) as region:
            assert region.address == middle
        # A hole of one page between two mapped ones: only a one-page mapping of another
        # thread can fill it (a page unmapped at the edge of the free area is taken by the
        # next mapping of any size, as Python's own arenas are).
        assert libc.munmap(middle, page) == 0
        try:
            domain.register(hmr.Pointer(middle, page)).close()
        except hmr.Error as error:
            return error
        if libc.msync(middle, page, 4) == 0:  # MS_SYNC: mapped again, by someone else
            raise LookupError("the page was mapped again")
        return None
    finally:
        libc.munmap(base, 3 * page)


def test_pointer_to_unmapped_memory_is_refused():
    # A domain whose NIC requires HMR_MR_ALLOCATED checks that every page is mapped; the
    # cache must not answer with the registration it kept of the page before the munmap.
    libc = _libc()
    with hmr.Domain(nic_options="require=ALLOCATED|PROV_KEY|VIRT_ADDR") as domain:
        for _ in range(10):
            try:
                error = _unmapped_page_once(domain, libc)
            except LookupError:
                continue
            assert error is not None, "an unmapped page was registered"
            assert isinstance(error, hmr.InvalidArgumentError)
            assert "mapped" in str(error)
            assert error.code == errno.EFAULT
            return
        pytest.fail("another thread mapped the freed page ten times in a row")


def test_second_close_and_closed_region(domain):
    region = domain.register(bytearray(100))
    region.close()
    region.close()
    assert region.closed and region.obj is None
    for name in ("key", "desc", "iface", "device"):
        with pytest.raises(hmr.ClosedError):
            getattr(region, name)
    with pytest.raises(hmr.ClosedError):
        region.pack_rkey()
    assert "closed" in repr(region)


def test_region_keeps_its_object_alive_until_closed(domain):
    class Buffer(bytearray):  # bytearray itself cannot be weakly referenced
        pass

    obj = Buffer(8192)
    ref = weakref.ref(obj)
    region = domain.register(obj)
    del obj
    gc.collect()
    assert ref() is not None, "the region let go of its object while registered"
    region.close()
    gc.collect()
    assert ref() is None, "close() did not let go of the object"


def test_numpy_array_kept_alive_and_its_memory_stays(domain):
    array = numpy.full(1 << 16, 7, dtype=numpy.uint8)
    ref = weakref.ref(array)
    region = domain.register(array)
    address = region.address
    del array
    gc.collect()
    assert ref() is not None
    assert hmr.query(hmr.Pointer(address, 1 << 16)).iface == "system"
    del region  # collecting an open region closes it
    gc.collect()
    assert ref() is None


def test_registered_bytearray_cannot_be_resized(domain):
    data = bytearray(100)
    with domain.register(data):
        with pytest.raises(BufferError):
            data.extend(b"x" * 10000)
    data.extend(b"x")  # closed: the export is gone


def test_registered_mmap_cannot_be_closed(domain):
    page = mmap.mmap(-1, 4096)
    with domain.register(page):
        with pytest.raises(BufferError):
            page.close()
    page.close()


def test_cache_hit_is_served_and_counted(domain):
    array = numpy.zeros(1 << 20, dtype=numpy.uint8)
    first = domain.register(array)
    second = domain.register(array)
    assert first.key == second.key
    assert domain.stats()["cache_hits"] == 1
    first.close()
    second.close()
    assert domain.stats()["mr_open"] == 0


def test_zero_bytes_register_as_in_c(domain):
    # hmr registers zero bytes (docs/semantics.md, "Zero bytes and no access").
    with domain.register(bytearray(0)) as region:
        assert region.length == 0


def test_region_cannot_be_made_directly():
    with pytest.raises(TypeError):
        hmr.MemoryRegion()
