"""Packed remote keys and the software NIC's RMA: a peer domain reaches a region through the
bytes of pack_rkey(), as a transport would; bad blobs; closed keys and endpoints."""
import errno

import numpy
import pytest

import hmr


@pytest.fixture
def pair():
    """(target domain, peer domain, peer endpoint connected to a target endpoint)."""
    with hmr.Domain() as target, hmr.Domain() as peer:
        target_ep = target.endpoint()
        peer_ep = peer.endpoint()
        peer_ep.connect(target_ep)
        yield target, peer, peer_ep


def test_write_and_read_through_an_unpacked_key(pair):
    target, peer, ep = pair
    memory = numpy.zeros(1 << 16, dtype=numpy.uint8)
    region = target.register(memory)
    blob = region.pack_rkey()
    assert isinstance(blob, bytes) and len(blob) == target.md_query()["rkey_packed_size"]
    with peer.unpack_rkey(blob) as rkey:
        assert rkey.address == region.address and rkey.length == region.length
        assert rkey.key == region.key and rkey.iface == "system" and rkey.device == 0
        assert len(rkey.raw_key) == 8
        message = b"hello from the peer"
        ep.write(message, rkey.address + 1000, rkey.key)
        assert memory[1000:1000 + len(message)].tobytes() == message
        back = bytearray(len(message))
        ep.read(back, rkey.address + 1000, rkey.key)
        assert bytes(back) == message
        # A numpy array as the local side, and a region (its descriptor goes along).
        local = numpy.arange(256, dtype=numpy.uint8)
        ep.write(local, rkey.address, rkey.key)
        assert (memory[:256] == local).all()
        with peer.register(local, hmr.READ | hmr.WRITE) as local_region:
            ep.read(local_region, rkey.address + 1000, rkey.key)
        assert local[:len(message)].tobytes() == message
    assert rkey.closed
    rkey.release()  # harmless
    with pytest.raises(hmr.ClosedError):
        rkey.key
    region.close()


def test_rma_outside_the_region_fails(pair):
    target, peer, ep = pair
    memory = numpy.zeros(4096, dtype=numpy.uint8)
    with target.register(memory, hmr.REMOTE_READ) as region:
        with peer.unpack_rkey(region.pack_rkey()) as rkey:
            with pytest.raises(hmr.Error):
                ep.write(b"x" * 100, rkey.address + 4090, rkey.key)
            with pytest.raises(hmr.Error) as caught:  # no REMOTE_WRITE granted
                ep.write(b"x", rkey.address, rkey.key)
            assert caught.value.code in (errno.EACCES, errno.EPERM, errno.EINVAL)


def test_read_into_read_only_memory_is_refused(pair):
    target, peer, ep = pair
    with target.register(bytearray(64)) as region:
        with pytest.raises(hmr.AccessError):
            ep.read(b"immutable", region.address, region.key)


@pytest.mark.parametrize("mangle", [
    lambda blob: blob[:10],
    lambda blob: b"",
    lambda blob: blob[:-1] + bytes([blob[-1] ^ 0xFF]),
    lambda blob: b"XXXX" + blob[4:],
    lambda blob: blob + b"\0",
], ids=["truncated", "empty", "checksum", "magic", "too-long"])
def test_bad_blobs_are_refused(domain, mangle):
    with domain.register(bytearray(4096)) as region:
        blob = region.pack_rkey()
    with pytest.raises(hmr.InvalidArgumentError) as caught:
        domain.unpack_rkey(mangle(blob))
    assert caught.value.code == errno.EINVAL and caught.value.reason


def test_unpack_rkey_needs_bytes(domain):
    with pytest.raises(TypeError):
        domain.unpack_rkey("not bytes")


def test_endpoint_close_and_errors(domain):
    ep = domain.endpoint()
    with pytest.raises(TypeError):
        ep.connect("not an endpoint")
    with pytest.raises(hmr.Error):  # not connected
        ep.write(b"x", 0, 0)
    ep.close()
    ep.close()
    assert ep.closed
    with pytest.raises(hmr.ClosedError):
        ep.write(b"x", 0, 0)
    with pytest.raises(hmr.ClosedError):
        ep.connect(domain.endpoint())
    with domain.endpoint() as other:
        with pytest.raises(hmr.ClosedError):
            other.connect(ep)
    assert other.closed


def test_host_memory_has_no_shadow_and_sync_has_nothing_to_copy(pair):
    """remote_address is what a peer targets; for host memory that is the region's own address,
    and sync() (for host shadows of device memory) checks its arguments and copies nothing."""
    target, peer, ep = pair
    memory = numpy.zeros(1 << 16, dtype=numpy.uint8)
    region = target.register(memory)
    assert region.path == "address" and region.shadow is None
    assert region.remote_address == region.address
    with peer.unpack_rkey(region.pack_rkey()) as rkey:
        assert rkey.address == region.remote_address
    region.sync(hmr.SYNC_TO_DEVICE)
    region.sync(hmr.SYNC_FROM_DEVICE, 100, 200)
    region.sync(hmr.SYNC_FROM_DEVICE, offset=len(memory), length=0)
    for args in ((0,), (hmr.SYNC_TO_DEVICE | hmr.SYNC_FROM_DEVICE,), (hmr.SYNC_TO_DEVICE, 1 << 17),
                 (hmr.SYNC_TO_DEVICE, 100, 1 << 16)):
        with pytest.raises(hmr.InvalidArgumentError):
            region.sync(*args)
    with pytest.raises(TypeError):
        region.sync()
    with pytest.raises(TypeError):
        region.sync("to device")
    region.close()
    # (path was read while open: what was asked before is not answered after close either)
    for name in ("shadow", "remote_address", "path", "iface", "kind", "device", "cached"):
        with pytest.raises(hmr.ClosedError):
            getattr(region, name)
    with pytest.raises(hmr.ClosedError):
        region.sync(hmr.SYNC_TO_DEVICE)


def test_allow_hmem_copy_changes_nothing_for_host_memory():
    with hmr.Domain("sim", allow_hmem_copy=True) as domain:
        memory = bytearray(8192)
        with domain.register(memory) as region:
            assert region.path == "address" and region.shadow is None
