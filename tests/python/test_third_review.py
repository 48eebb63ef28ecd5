"""What the twenty-sixth session's review of the package found, each a test that failed before
its fix: torch's conjugate and negative views registered as their raw bytes, a sparse tensor's
RuntimeError escaping, a seen range with another access registered with the GIL held, the
domain's handle used after a buffer export that closed it, Endpoint.close() and connect()
holding the GIL while they wait for another thread's copy, calls on children let in while
Domain.close() closes them, a RemoteKey's facts answered in a forked child, and a transfer's
error reason replaced by what its source's release did.  Run with Debian's interpreter
(conftest.py)."""
import ctypes
import errno
import os
import sys
import threading

import numpy
import pytest
import torch

import hmr
from test_review_findings import DLPackProducer, _DELETER, _Managed
from conftest import pinning_sim
from test_second_review import _WritePair, _hinted_within, _lets_other_threads_run


@pytest.mark.parametrize("make, which", [
    (lambda: torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64).conj(), "conjugate"),
    (lambda: torch._neg_view(torch.arange(8.0)), "negative"),
    (lambda: torch._neg_view(torch.arange(16.0).reshape(4, 4).t()), "negative"),
], ids=["conj", "neg", "neg-permuted"])
def test_conjugate_and_negative_views_are_refused(domain, make, which):
    # Their memory holds the values before the conjugation or negation (torch applies it when
    # it reads them): a peer reading the region would get other numbers than the tensor's.
    tensor = make()
    with pytest.raises(hmr.InvalidArgumentError, match=which + " view") as caught:
        domain.register(tensor)
    assert "resolve_" in str(caught.value)
    # What the message says works.
    resolved = tensor.resolve_conj() if which == "conjugate" else tensor.resolve_neg()
    if resolved.is_contiguous():
        with domain.register(resolved) as region:
            assert region.length == resolved.numel() * resolved.element_size()


def test_a_sparse_tensor_is_refused_as_an_hmr_error(domain):
    # Its is_contiguous() says True, and its data_ptr() raised torch's RuntimeError through
    # register(); the DLPack route now refuses it with torch's reason as the cause.
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    with pytest.raises(hmr.InvalidArgumentError) as caught:
        domain.register(sparse)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_seen_range_with_another_access_is_registered_without_the_gil():
    # The cache's key holds the access: the same range with another access is a miss (a NIC
    # registration), which must not run with the GIL held because the range was seen before.
    # (A hint is trusted once a registration of the range was as quick as a hit.)
    big = numpy.zeros(64 << 20, numpy.uint8)
    with pinning_sim(big.nbytes) as domain:
        assert _lets_other_threads_run(lambda: domain.register(big).close())  # a miss
        assert _hinted_within(lambda: _lets_other_threads_run(lambda: domain.register(big).close()))
        # (That the miss of another access runs without the GIL is checked exactly on the
        # fake libibverbs: test_gil_on_the_fake_nic.py.  Here its pages are in already and
        # the software NIC registers in microseconds, too quick for another thread to be
        # sure to get in.)
        domain.register(big, hmr.REMOTE_READ).close()
        assert domain.stats()["nic_registrations"] == 2
        assert _hinted_within(
            lambda: _lets_other_threads_run(lambda: domain.register(big, hmr.REMOTE_READ).close()))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a class's __buffer__ is Python code "
                    "from CPython 3.12 on; before, no buffer export runs Python code")
def test_unpack_rkey_finds_the_domain_closed_by_the_blobs_buffer_export():
    owner = hmr.Domain("sim")
    region = owner.register(bytearray(4096))
    blob = region.pack_rkey()
    victim = hmr.Domain("sim")

    class ClosesTheDomain:
        def __buffer__(self, flags):
            victim.close()
            return memoryview(blob)

    with pytest.raises(hmr.ClosedError):
        victim.unpack_rkey(ClosesTheDomain())
    region.close()
    owner.close()


def _during_a_write(call):
    """Whether other Python threads ran while call() waited for a 256 MiB write on another
    thread (hmr_ep_close and hmr_ep_connect wait for every RMA of the process to leave the
    endpoints' links, which a write holds for its whole copy).  call() is made once the copy
    has begun (its first byte landed) and before it ended (its last byte had not).  A round in
    which no other thread ran proves nothing by itself (the copy may end between that look and
    the call, or the other thread may not be scheduled before it does: once on a loaded
    machine), so it is tried again; a call that holds the GIL lets none run in any round."""
    size = 256 << 20
    rounds_in_time = 0
    with _WritePair(size) as pair:
        for value in range(1, 9):
            writer = _start_writing(pair, value, size)
            in_time = pair.memory[-1] != value
            ran = _lets_other_threads_run(lambda: call(pair.peer))
            writer.join()
            assert pair.memory[0] == value and pair.memory[-1] == value
            rounds_in_time += in_time
            if in_time and ran:
                return True
    if rounds_in_time == 0:
        pytest.fail("every write ended before the call")
    return False


def _start_writing(pair, value, size):
    """A thread writing `size` bytes of `value` through the pair, returned once its copy has
    begun (the first byte landed)."""
    data = bytearray([value]) * size
    writer = threading.Thread(target=lambda: pair.ep.write(data, pair.key.address, pair.key.key))
    writer.start()
    while pair.memory[0] != value:  # (the writer lets go of the GIL for its copy)
        assert writer.is_alive() or pair.memory[0] == value, "the write failed"
    return writer


def test_endpoint_close_and_connect_let_go_of_the_gil_while_they_wait_for_a_write():
    # With the GIL held, every Python thread waited for the other thread's copy to end.
    assert _during_a_write(lambda domain: domain.endpoint().close())
    assert _during_a_write(lambda domain: domain.endpoint().connect(domain.endpoint()))


def test_calls_on_children_while_domain_close_closes_them_are_refused():
    # A DLPack deleter runs while Domain.close() closes its region: a call on another child of
    # the domain then must not start (docs/python.md: it raises ClosedError).
    domain = hmr.Domain("sim")
    other = domain.register(bytearray(4096))
    endpoint = domain.endpoint()
    seen = []

    @_DELETER
    def deleter(managed):
        for name, call in (("pack_rkey", other.pack_rkey), ("key", lambda: other.key),
                           ("write", lambda: endpoint.write(b"x", 0, 0))):
            try:
                call()
                seen.append((name, None))
            except hmr.Error as error:
                seen.append((name, error))

    buffer = (ctypes.c_uint8 * 4096)()
    producer = DLPackProducer(buffer, (4096,))
    producer.managed.deleter = deleter
    held = domain.register(producer)  # newest first: closed before `other`
    domain.close()
    assert [name for name, _ in seen] == ["pack_rkey", "key", "write"]
    for name, error in seen:
        assert isinstance(error, hmr.ClosedError), (name, error)
        assert "being closed" in error.reason, (name, error.reason)
    assert held.closed and other.closed and endpoint.closed


def test_a_remote_keys_facts_are_refused_in_a_forked_child():
    owner = hmr.Domain("sim")
    region = owner.register(bytearray(4096))
    rkey = owner.unpack_rkey(region.pack_rkey())
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for name in ("address", "length", "key", "raw_key", "iface", "device"):
                try:
                    getattr(rkey, name)
                    code = 2
                except hmr.ClosedError as refused:
                    if refused.code != errno.EBADF or "fork()" not in refused.reason:
                        code = 3
            rkey.release()
            region.close()
            owner.close()
        except BaseException as e:  # noqa: BLE001
            sys.stderr.write(f"child failed: {e!r}\n")
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert rkey.key == region.key  # the parent's still answers
    rkey.release()
    region.close()
    owner.close()


def test_a_failed_transfer_keeps_its_reason_when_its_sources_release_calls_hmr():
    # The source's DLPack deleter makes a failing hmr call of its own; the write's error must
    # still carry the write's reason.
    domain = hmr.Domain("sim")
    target = domain.endpoint()
    ep = domain.endpoint()
    ep.connect(target)

    @_DELETER
    def deleter(managed):
        try:
            domain.unpack_rkey(b"\x00" * 7)
        except hmr.Error:
            pass

    buffer = (ctypes.c_uint8 * 64)()
    producer = DLPackProducer(buffer, (64,))
    producer.managed.deleter = deleter
    with pytest.raises(hmr.Error) as caught:
        ep.write(producer, 0x1000, 0xDEAD)
    assert "hmr_ep_write" in str(caught.value)
    assert "rkey" not in caught.value.reason, caught.value.reason
    ep.close()
    target.close()
    domain.close()


def test_domain_close_beside_an_endpoint_closing_on_another_thread_ends():
    # An endpoint's close lets go of the GIL while it waits for a write's copy, and stays on
    # its domain's list until it ends: Domain.close on another thread restarted onto it for
    # ever (its close answered "closed" at once), or took a dying one back to life.
    size = 256 << 20
    with _WritePair(size) as pair:
        closing = pair.peer.endpoint()
        writer = _start_writing(pair, 0x77, size)
        outcomes = []

        def close_the_endpoint():
            try:
                closing.close()
                outcomes.append("closed")
            except hmr.BusyError:
                outcomes.append("busy")

        closer = threading.Thread(target=close_the_endpoint)
        closer.start()
        finished = threading.Event()
        domain_outcome = []

        def close_the_domain():
            try:
                pair.peer.close()
                domain_outcome.append("closed")
            except hmr.BusyError:
                domain_outcome.append("busy")
            finally:
                finished.set()

        domain_closer = threading.Thread(target=close_the_domain)
        domain_closer.start()
        assert finished.wait(120), "Domain.close never ended beside an endpoint closing elsewhere"
        domain_closer.join()
        closer.join()
        writer.join()
        assert outcomes and domain_outcome
        if outcomes == ["busy"]:  # (the domain's close had it: closed there)
            assert closing.closed or domain_outcome == ["busy"]
        closing.close()
        assert closing.closed
