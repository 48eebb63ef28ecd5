"""hmr.Domain: open, options, close (with and without open children), stats, md_query."""
import errno

import numpy
import pytest

import hmr
from conftest import header_struct_fields


def test_context_manager_closes():
    with hmr.Domain() as domain:
        assert not domain.closed
        assert domain.nic == "sim"
    assert domain.closed
    domain.close()  # a second close does nothing


def test_negotiated_attributes():
    with hmr.Domain("sim", mr_mode=hmr.MR_BASIC | hmr.MR_LOCAL) as domain:
        assert domain.mr_mode & hmr.MR_PROV_KEY
        assert not domain.mr_mode & hmr.MR_LOCAL  # hmr emulates it
        assert domain.key_size == 8
        assert domain.cache_monitor in ("memhooks", "userfaultfd")


def test_options_and_monitor():
    with hmr.Domain("sim", nic_options="key_size=4", cache_monitor="disabled") as domain:
        assert domain.key_size == 4
        assert domain.cache_monitor == "disabled"
        array = numpy.ones(4096, dtype=numpy.uint8)
        with domain.register(array) as region:
            assert not region.cached


@pytest.mark.parametrize("kwargs, error, code", [
    ({"nic": "nonsense"}, hmr.NotSupportedError, errno.ENODEV),
    ({"nic_options": "no_such_option=1"}, hmr.InvalidArgumentError, errno.EINVAL),
    ({"mr_mode": hmr.MR_BASIC | hmr.MR_SCALABLE}, hmr.InvalidArgumentError, errno.EINVAL),
    ({"cache_monitor": "no-such-monitor"}, hmr.Error, None),
    ({"provider": "tcp"}, hmr.InvalidArgumentError, errno.EINVAL),
])
def test_bad_domain_arguments(kwargs, error, code):
    with pytest.raises(error) as caught:
        hmr.Domain(**kwargs)
    if code is not None:
        assert caught.value.code == code
    assert caught.value.reason


def test_bad_argument_types():
    with pytest.raises(TypeError):
        hmr.Domain(5)
    with pytest.raises(TypeError):
        hmr.Domain("sim", "positional-mr_mode")


def test_stats_keys_are_the_struct_fields(domain):
    fields = header_struct_fields("hmr_domain_stats")
    assert fields[0] == "size"
    stats = domain.stats()
    assert list(stats) == fields[1:]
    array = numpy.zeros(8192, dtype=numpy.uint8)
    domain.register(array).close()
    domain.register(array).close()
    stats = domain.stats()
    assert stats["registrations"] == 2
    assert stats["cache_hits"] == 1 and stats["cache_misses"] == 1
    assert stats["mr_open"] == 0


def test_md_query(domain):
    attr = domain.md_query()
    assert attr["key_size"] == 8
    assert attr["rkey_packed_size"] > 0
    assert attr["reg_mem_types"] & 1  # system memory
    assert attr["max_registrations_source"] in ("nic", "application", "none")
    # Device memory of loaded runtimes only (none here; a GPU machine's CUDA may export
    # dma-bufs the sim NIC imports); sim registers device addresses only with peer_direct=1.
    assert attr["dmabuf_mem_types"] & ~attr["reg_mem_types"] == 0
    assert attr["dmabuf_mem_types"] & 1 == 0  # never system memory
    assert attr["peer_direct_mem_types"] == 0
    with_cost = domain.md_query(reg_cost=True)
    assert with_cost["reg_cost_overhead_ns"] >= 0
    assert "reg_cost_measured" in with_cost


def test_md_query_and_stats_refuse_arguments_they_do_not_take(domain):
    # reg_cost is keyword-only, and nothing else is taken; stats and cache_flush take nothing.
    for call in (lambda: domain.md_query(True), lambda: domain.md_query(reg_cost=True, extra=1),
                 lambda: domain.md_query(cost=True), lambda: domain.stats(1),
                 lambda: domain.stats(field="hits"), lambda: domain.cache_flush(0)):
        with pytest.raises(TypeError):
            call()
    assert domain.stats()["mr_open"] == 0  # the domain is as it was


def test_cache_flush(domain):
    array = numpy.zeros(8192, dtype=numpy.uint8)
    domain.register(array).close()
    assert domain.stats()["cache_regions"] == 1
    domain.cache_flush()
    assert domain.stats()["cache_regions"] == 0


def test_closed_domain_refuses_everything():
    domain = hmr.Domain()
    domain.close()
    array = numpy.zeros(16, dtype=numpy.uint8)
    for call in (lambda: domain.register(array), domain.stats, domain.md_query,
                 domain.endpoint, domain.cache_flush, lambda: domain.unpack_rkey(b"x" * 52)):
        with pytest.raises(hmr.ClosedError) as caught:
            call()
        assert caught.value.code == errno.EBADF


def test_close_closes_open_children():
    domain = hmr.Domain()
    array = numpy.zeros(4096, dtype=numpy.uint8)
    region = domain.register(array)
    other = hmr.Domain()
    rkey = domain.unpack_rkey(other.register(array).pack_rkey())
    endpoint = domain.endpoint()
    domain.close()
    assert region.closed and rkey.closed and endpoint.closed and domain.closed
    with pytest.raises(hmr.ClosedError):
        region.key
    region.close()  # harmless
    other.close()


def test_domain_collected_with_open_region_stays_usable():
    array = numpy.zeros(4096, dtype=numpy.uint8)
    region = hmr.Domain().register(array)  # the region keeps its domain alive
    assert region.key != hmr.KEY_NOTAVAIL
    region.close()
