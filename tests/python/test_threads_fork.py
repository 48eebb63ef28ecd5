"""Threads registering concurrently (the GIL released around misses), Domain.close while
another thread is inside a call, and fork: a child opens its own domain and registers."""
import errno
import os
import sys
import threading

import numpy
import pytest

import hmr


def test_threads_register_concurrently(domain):
    buffers = [numpy.zeros(4096 * (i + 1), dtype=numpy.uint8) for i in range(16)]
    errors = []
    start = threading.Barrier(8)

    def work(seed):
        try:
            start.wait()
            for i in range(2000):
                array = buffers[(seed + i) % len(buffers)]
                with domain.register(array) as region:
                    assert region.length == array.nbytes
                    assert region.key != hmr.KEY_NOTAVAIL
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = domain.stats()
    assert stats["registrations"] == 8 * 2000
    assert stats["mr_open"] == 0
    assert stats["cache_misses"] <= len(buffers) * 8


def test_threads_sharing_one_region_object_close_once(domain):
    region = domain.register(bytearray(4096))
    threads = [threading.Thread(target=region.close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert region.closed and domain.stats()["mr_open"] == 0


def test_domain_close_closes_a_region_another_thread_made():
    domain = hmr.Domain()
    entered, release = threading.Event(), threading.Event()

    class Slow:  # its __cuda_array_interface__ runs while register holds the domain
        @property
        def __cuda_array_interface__(self):
            entered.set()
            release.wait(5)
            array = numpy.zeros(16, dtype=numpy.uint8)
            self.keep = array
            return {"data": (array.ctypes.data, False), "shape": (16,), "typestr": "|u1",
                    "version": 3}

    result = []
    worker = threading.Thread(target=lambda: result.append(domain.register(Slow())))
    worker.start()
    entered.wait(5)
    release.set()
    worker.join()
    domain.close()  # closes the region the worker made
    assert result and result[0].closed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_child_uses_a_new_domain(domain):
    array = numpy.arange(1 << 16, dtype=numpy.uint8)
    parent_region = domain.register(array)
    pid = os.fork()
    if pid == 0:  # the child: exit code says what went wrong
        code = 0
        try:
            with hmr.Domain() as child_domain:
                for _ in range(3):
                    with child_domain.register(array) as region:
                        if region.length != array.nbytes:
                            code = 2
                stats = child_domain.stats()
                if stats["cache_hits"] != 2:
                    code = 3
            # The parent's domain is refused in the child, with the reason, and closes.
            try:
                domain.register(bytearray(4096))
                code = 4
            except hmr.ClosedError as refused:
                if refused.code != errno.EBADF or "fork()" not in refused.reason:
                    code = 5
            try:  # the region's own facts too
                parent_region.key
                code = 6
            except hmr.ClosedError as refused:
                if "fork()" not in refused.reason:
                    code = 7
            parent_region.close()
            domain.close()
        except BaseException as e:  # noqa: BLE001
            sys.stderr.write(f"child failed: {e!r}\n")
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent is unaffected.
    assert not parent_region.closed
    domain.register(array).close()
    assert domain.stats()["cache_hits"] >= 1
    parent_region.close()



# Run as a program of its own: the child must end as a Python program does, and pytest would
# catch its SystemExit and go on with the session.
_LARGE_REGISTRATION_THEN_FORK = """
import mmap, os, signal, sys
import hmr
with hmr.Domain("sim") as domain:
    large = mmap.mmap(-1, 64 << 20)
    region = domain.register(large)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)  # a hang ends as SIGALRM
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
    region.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_child_of_a_large_registration_ends_through_sys_exit():
    """64 MiB is pre-faulted by hmr's registration pool, whose threads stay in the parent.  A
    child that ends as Python programs do (sys.exit: interpreter teardown, then the C exit()
    with its static destructors) ends.  Before, it waited for ever in exit() for the parent's
    pool threads (its alarm: -14)."""
    import subprocess

    # Pool workers even on a machine of one CPU (the default is one thread per CPU, up to 4).
    env = dict(os.environ, HMR_REG_THREADS="4")
    done = subprocess.run([sys.executable, "-c", _LARGE_REGISTRATION_THEN_FORK], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", f"the child's exit code: {done.stdout!r} {done.stderr!r}"
