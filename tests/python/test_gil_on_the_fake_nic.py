"""Where the package lets go of the GIL, checked exactly: a verbs domain on the project's fake
libibverbs (tests/fakes/fake_ibverbs.c), whose registering calls and ibv_dereg_mr call a probe
the test gives it, CPython's own PyGILState_Check (through ctypes), and keep its answer: 0
when the NIC call ran without the GIL.  (On the software NIC a registration of pages already
in takes microseconds, too quick for another thread to be sure to get in: timing cannot tell.)
A process of its own: the verbs library a process uses is chosen when hmr first loads it."""
from conftest import FAKE_IBVERBS, needs_fake_ibverbs, run_child

CHILD = r"""
import ctypes, mmap, os
import hmr

fake = ctypes.CDLL(os.environ["HMR_IBVERBS_LIBRARY"])
fake.fake_ibverbs_last_probe.argtypes = [ctypes.c_char_p]
fake.fake_ibverbs_set_probe(ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p))

def held(call):
    # Whether the GIL was held in the last NIC call of that kind (1), not (0), or none (-1).
    return fake.fake_ibverbs_last_probe(call)

assert ctypes.pythonapi.PyGILState_Check() == 1  # (the probe says so with the GIL held)

# A registration the cache does not keep: its close is a NIC deregistration, as long as its
# miss (every page unpinned on a real NIC).  It was made with the GIL held.
with hmr.Domain("verbs", nic_options="device=fake_mlx5_0", cache_monitor="disabled") as domain:
    region = domain.register(bytearray(1 << 20), hmr.REMOTE_READ)
    assert held(b"reg") == 0
    region.close()
    assert held(b"dereg") == 0, "ibv_dereg_mr ran with the GIL held"
    # A close of it while that close deregisters (from the probe, inside ibv_dereg_mr, which
    # takes the GIL): not done before the first is.  It returned at once, the memory still
    # registered and its export held.
    region = domain.register(bytearray(1 << 20), hmr.REMOTE_READ)
    outcomes = []

    def close_again():
        try:
            region.close()
            outcomes.append("closed")
        except hmr.BusyError:
            outcomes.append("busy")
        return 0

    again = ctypes.CFUNCTYPE(ctypes.c_int)(close_again)
    fake.fake_ibverbs_set_probe(again)
    region.close()
    assert outcomes == ["busy"], outcomes
    assert region.closed
    fake.fake_ibverbs_set_probe(ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p))

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
size = 1 << 20
protection = mmap.PROT_READ | mmap.PROT_WRITE
flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
map_fixed = 0x10

with hmr.Domain("verbs", nic_options="device=fake_mlx5_0") as domain:
    if domain.cache_monitor != "disabled":
        array = bytearray(size)
        domain.register(array).close()
        assert held(b"reg") == 0  # a miss
        for _ in range(5):
            domain.register(array).close()  # hits: no NIC call
        assert held(b"reg") == -1
        # The same range with another access is another cache entry: a miss, which must not
        # be made with the GIL held because the range was seen (and hinted) before.
        domain.register(array, hmr.REMOTE_READ).close()
        assert held(b"reg") == 0, "a miss of a seen range with another access held the GIL"

        # Memory freed and mapped again at one address on every step (a large array
        # reallocated each iteration): every step's registration is a miss.  The hint of the
        # first made every later one with the GIL held.
        address = libc.mmap(None, size, protection, flags, -1, 0)
        try:
            answers = []
            for _ in range(6):
                ctypes.memset(address, 1, size)
                domain.register(hmr.Pointer(address, size)).close()
                answers.append(held(b"reg"))
                # New pages over the old in one step (the kernel unmaps them first, and the
                # monitor hears of it).  An munmap, then an mmap there, let another thread's
                # malloc take the address between the two, and the fixed mapping then went
                # with that thread's free: a registration found the range unmapped.
                assert libc.mmap(address, size, protection, flags | map_fixed, -1, 0) == address
            assert answers == [0] * 6, answers
        finally:
            libc.munmap(address, size)
    else:
        print("no cache monitor here: the cached cases are skipped")
fake.fake_ibverbs_set_probe(None)
print("ok")
"""


@needs_fake_ibverbs
def test_nic_calls_that_may_block_run_without_the_gil():
    output = run_child(["-c", CHILD], HMR_IBVERBS_LIBRARY=FAKE_IBVERBS)
    assert "skipped" not in output, output
