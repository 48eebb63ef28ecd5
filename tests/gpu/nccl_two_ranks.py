"""Real NCCL collectives through libnccl-net-hmr.so: two ranks on one GPU as two hosts.

NCCL takes a peer for another node when its host hash differs, and NCCL_HOSTID replaces that
hash (NCCL's getHostHash); its duplicate-GPU check compares host hash and bus id together and
its intra-node transports (P2P, SHM) need equal host hashes. So two processes on the same GPU
with NCCL_HOSTID=a and NCCL_HOSTID=b form a two-node communicator whose every byte goes
through the network plugin NCCL chose.

Run by the driver (no --rank):
    python3 tests/gpu/nccl_two_ranks.py --out OUT [--phases bench,register,kill] [--quick]
with libnccl-net-hmr.so, libhmr.so.0 and libfabric on LD_LIBRARY_PATH (tests/gpu/make_bundle.sh
puts them in <bundle>/lib). It uses PyTorch only for device memory, streams, events and the
reference results; NCCL itself is called through ctypes (the libnccl.so.2 PyTorch loaded, or
HMR_NCCL_LIBRARY), so the calls are NCCL's own API, as a C program would make them.

Phases (each writes its ranks' logs to OUT/<phase>-<transport>-rank<r>.log):
  bench     all_reduce, all_gather, reduce_scatter, broadcast and send/recv from 8 B to
            256 MiB, every result compared with the exact expected values, over the plugin
            (tcp, shm) and NCCL's own socket transport, runs interleaved; a table in
            OUT/nccl_two_ranks.md and RESULT lines.
  register  buffers from ncclMemAlloc registered with ncclCommRegister (NCCL_LOCAL_REGISTER=1),
            against plain buffers: hmr's registrations per step (hmr_nccl_net_query_stats).
  kill      rank 1 is killed (SIGKILL) in the middle of a stream of all-reduces: rank 0 must
            see an NCCL error (ncclCommGetAsyncError) within HMR_NCCL_WRITE_TIMEOUT plus a
            margin, and never hang; the same over NCCL's socket transport for reference.
Exit status 0 only if every phase passed. The interpreter is the GPU machine's python3 (with
PyTorch for CUDA); this machine's Debian python cannot run it without a GPU.
"""
import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wrong_elements  # noqa: E402  (beside this script)

# ---------------------------------------------------------------------------------- NCCL API
# From nccl.h (NCCL 2.28): enums and prototypes used below.
NCCL_SUCCESS = 0
NCCL_IN_PROGRESS = 7
NCCL_FLOAT32 = 7
NCCL_SUM = 0
NCCL_UNIQUE_ID_BYTES = 128


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * NCCL_UNIQUE_ID_BYTES)]


def find_nccl_library():
    """The libnccl.so.2 this process already has (PyTorch's), else HMR_NCCL_LIBRARY, else the
    loader's search path."""
    explicit = os.environ.get("HMR_NCCL_LIBRARY")
    if explicit:
        return explicit
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libnccl.so"):
                    return path
    except OSError:
        pass
    return "libnccl.so.2"


class Nccl:
    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        signatures = {
            "ncclGetVersion": [ctypes.POINTER(i)],
            "ncclGetUniqueId": [ctypes.POINTER(NcclUniqueId)],
            "ncclCommInitRank": [ctypes.POINTER(vp), i, NcclUniqueId, i],
            "ncclCommDestroy": [vp],
            "ncclCommAbort": [vp],
            "ncclCommGetAsyncError": [vp, ctypes.POINTER(i)],
            "ncclAllReduce": [vp, vp, sz, i, i, vp, vp],
            "ncclAllGather": [vp, vp, sz, i, vp, vp],
            "ncclReduceScatter": [vp, vp, sz, i, i, vp, vp],
            "ncclBroadcast": [vp, vp, sz, i, i, vp, vp],
            "ncclSend": [vp, sz, i, i, vp, vp],
            "ncclRecv": [vp, sz, i, i, vp, vp],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
            "ncclCommRegister": [vp, vp, sz, ctypes.POINTER(vp)],
            "ncclCommDeregister": [vp, vp],
            "ncclMemAlloc": [ctypes.POINTER(vp), sz],
            "ncclMemFree": [vp],
        }
        for name, args in signatures.items():
            function = getattr(lib, name)
            function.argtypes = args
            function.restype = ctypes.c_int
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetLastError.argtypes = [vp]
        lib.ncclGetLastError.restype = ctypes.c_char_p

    def check(self, rc, what, comm=None):
        if rc != NCCL_SUCCESS:
            detail = self.lib.ncclGetLastError(comm)
            raise RuntimeError(f"{what}: {rc} ({self.lib.ncclGetErrorString(rc).decode()}): "
                               f"{(detail or b'').decode(errors='replace')}")

    def version(self):
        v = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
        return v.value


# ---------------------------------------------------------------------------------- one rank
SIZES = [8, 4096, 65536, 1 << 20, 16 << 20, 256 << 20]
QUICK_SIZES = [8, 1 << 20, 16 << 20]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"]
# nccl-tests' bus bandwidth factors for 2 ranks.
BUS_FACTOR = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0,
              "sendrecv": 1.0}


def iterations_for(size):
    if size <= 65536:
        return 3, 30
    if size <= (1 << 20):
        return 2, 12
    if size <= (16 << 20):
        return 1, 6
    return 1, 3


def emit(kind, **fields):
    print(f"{kind} " + json.dumps(fields), flush=True)


def start_watchdog(seconds, what):
    """A rank that is stuck exits by itself (status 3) instead of holding the GPU machine."""
    def expire():
        print(f"WATCHDOG: {what} still running after {seconds} s; exiting", flush=True)
        os._exit(3)
    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


class Rank:
    def __init__(self, args):
        import torch  # noqa: imported here so the driver itself never needs PyTorch
        self.torch = torch
        self.args = args
        self.rank = args.rank
        self.peer = 1 - args.rank
        self.device = torch.device("cuda:0")
        torch.cuda.set_device(self.device)
        torch.zeros(1, device=self.device)  # the context, and PyTorch's libnccl, before NCCL
        self.nccl = Nccl(find_nccl_library())
        emit("INFO", rank=self.rank, nccl=self.nccl.version(), nccl_library=self.nccl.path,
             torch=torch.__version__, hostid=os.environ.get("NCCL_HOSTID"),
             net_plugin=os.environ.get("NCCL_NET_PLUGIN"), net=os.environ.get("NCCL_NET"))
        self.stream = torch.cuda.Stream(self.device)
        self.problems = []  # what check_result found wrong, in order
        self.comm = ctypes.c_void_p()
        self.init_comm()

    def init_comm(self):
        uid = NcclUniqueId()
        id_file = self.args.id_file
        if self.rank == 0:
            self.nccl.check(self.nccl.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
            with open(id_file + ".tmp", "wb") as f:
                f.write(bytes(uid))
            os.rename(id_file + ".tmp", id_file)
        else:
            deadline = time.time() + 60
            while not os.path.exists(id_file):
                if time.time() > deadline:
                    raise RuntimeError("rank 0 wrote no NCCL unique id within 60 s")
                time.sleep(0.05)
            with open(id_file, "rb") as f:
                raw = f.read()
            ctypes.memmove(ctypes.byref(uid), raw, NCCL_UNIQUE_ID_BYTES)
        began = time.time()
        self.nccl.check(self.nccl.lib.ncclCommInitRank(ctypes.byref(self.comm), 2, uid,
                                                       self.rank), "ncclCommInitRank")
        emit("INFO", rank=self.rank, comm_init_s=round(time.time() - began, 3))

    @property
    def sptr(self):
        return ctypes.c_void_p(self.stream.cuda_stream)

    def pattern(self, count, salt):
        # Small integers: sums of two ranks stay exact in float32 (wrong_elements.py).
        return wrong_elements.pattern_values(self.torch, count, salt, self.device)

    # Each collective: (send, recv, expected, launch, sources) for a message of `size` bytes.
    # `variant` moves every salt, so each warm-up iteration sends other bytes than the one
    # before: data left from an earlier step shows as wrong. `sources`: what each sender's
    # part of the result is (wrong_elements.describe), empty where the result is a sum.
    def setup(self, name, size, variant=0):
        torch, r, peer = self.torch, self.rank, self.peer
        n = max(1, size // 4)
        half = max(1, n // 2)
        lib, comm = self.nccl.lib, self.comm
        def salt(sender, case):
            return wrong_elements.salt_of(sender, case, variant)
        sources = []
        if name == "all_reduce":
            send = self.pattern(n, salt(r, 1))
            recv = torch.empty(n, device=self.device)
            expected = self.pattern(n, salt(0, 1)) + self.pattern(n, salt(1, 1))
            launch = lambda: lib.ncclAllReduce(send.data_ptr(), recv.data_ptr(), n, NCCL_FLOAT32,
                                               NCCL_SUM, comm, self.sptr)
        elif name == "all_gather":
            send = self.pattern(half, salt(r, 2))
            recv = torch.empty(2 * half, device=self.device)
            expected = torch.cat([self.pattern(half, salt(0, 2)), self.pattern(half, salt(1, 2))])
            sources = [("rank 0", salt(0, 2), 0), ("rank 1", salt(1, 2), half)]
            launch = lambda: lib.ncclAllGather(send.data_ptr(), recv.data_ptr(), half,
                                               NCCL_FLOAT32, comm, self.sptr)
        elif name == "reduce_scatter":
            send = self.pattern(2 * half, salt(r, 3))
            recv = torch.empty(half, device=self.device)
            total = self.pattern(2 * half, salt(0, 3)) + self.pattern(2 * half, salt(1, 3))
            expected = total[r * half:(r + 1) * half].clone()
            launch = lambda: lib.ncclReduceScatter(send.data_ptr(), recv.data_ptr(), half,
                                                   NCCL_FLOAT32, NCCL_SUM, comm, self.sptr)
        elif name == "broadcast":
            send = self.pattern(n, salt(0, 4)) if r == 0 else torch.zeros(n, device=self.device)
            recv = torch.empty(n, device=self.device)
            expected = self.pattern(n, salt(0, 4))
            sources = [("rank 0", salt(0, 4), 0)]
            launch = lambda: lib.ncclBroadcast(send.data_ptr(), recv.data_ptr(), n, NCCL_FLOAT32,
                                               0, comm, self.sptr)
        elif name == "sendrecv":
            send = self.pattern(n, salt(r, 5))
            recv = torch.empty(n, device=self.device)
            expected = self.pattern(n, salt(peer, 5))
            sources = [(f"rank {peer}", salt(peer, 5), 0),
                       (f"rank {r} (its own)", salt(r, 5), 0)]

            def launch():
                lib.ncclGroupStart()
                rc1 = lib.ncclSend(send.data_ptr(), n, NCCL_FLOAT32, peer, comm, self.sptr)
                rc2 = lib.ncclRecv(recv.data_ptr(), n, NCCL_FLOAT32, peer, comm, self.sptr)
                rc3 = lib.ncclGroupEnd()
                return rc1 or rc2 or rc3
        else:
            raise ValueError(name)
        return send, recv, expected, launch, sources

    def wait_stream(self, what, limit_s=120.0):
        """Waits for the stream while watching NCCL's asynchronous error."""
        deadline = time.time() + limit_s
        error = ctypes.c_int()
        while not self.stream.query():
            self.nccl.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(error))
            if error.value not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
                raise RuntimeError(f"{what}: NCCL async error {error.value} "
                                   f"({self.nccl.lib.ncclGetErrorString(error.value).decode()})")
            if time.time() > deadline:
                raise RuntimeError(f"{what}: not done after {limit_s} s")
            time.sleep(0.0002)

    def check_result(self, name, size, when, recv, expected, sources, previous=()):
        """Whether `recv` holds `expected`. If not, what is wrong (wrong_elements.describe,
        with the previous iteration's senders as candidate sources too) goes to the log as a
        BAD record and to self.problems, and the run goes on: the results after it say
        whether it lasts, which a rank that died at the first would never tell."""
        if self.torch.equal(recv, expected):
            return True
        candidates = list(sources) + [(f"{label}, previous iteration", salt, start)
                                      for label, salt, start in previous]
        found = wrong_elements.describe(self.torch, recv, expected, candidates)
        text = f"{name} {size} B, {when}: {wrong_elements.summary(found)}"
        emit("BAD", rank=self.rank, collective=name, bytes=size, when=when, text=text, **found)
        self.problems.append(text)
        return False

    def run_one(self, name, size):
        torch = self.torch
        warmup, iters = iterations_for(size)
        torch.cuda.synchronize()
        verified = True
        previous = ()
        # Each warm-up iteration sends other bytes (its own variant) and is checked.
        for k in range(warmup):
            send, recv, expected, launch, sources = self.setup(name, size, variant=k)
            recv.fill_(wrong_elements.FILL)
            self.nccl.check(launch(), f"{name} {size}", self.comm)
            self.wait_stream(f"{name} {size} warm-up")
            verified &= self.check_result(name, size, f"warm-up {k + 1} of {warmup}", recv,
                                          expected, sources, previous)
            previous = sources
        recv.fill_(wrong_elements.FILL)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        wall = time.perf_counter()
        start.record(self.stream)
        for _ in range(iters):
            self.nccl.check(launch(), f"{name} {size}", self.comm)
        stop.record(self.stream)
        self.wait_stream(f"{name} {size} timed")
        wall = time.perf_counter() - wall
        seconds = start.elapsed_time(stop) / 1000.0 / iters
        verified &= self.check_result(name, size, "after the timed iterations", recv,
                                      expected, sources)
        algbw = size / seconds / 1e9
        emit("RES", rank=self.rank, collective=name, bytes=size, iters=iters,
             us=round(seconds * 1e6, 2), algbw_GBps=round(algbw, 4),
             busbw_GBps=round(algbw * BUS_FACTOR[name], 4), wall_us=round(wall / iters * 1e6, 1),
             verified=verified)

    def bench(self):
        sizes = QUICK_SIZES if self.args.quick else SIZES
        if self.args.sizes:
            sizes = [int(s) for s in self.args.sizes.split(",")]
        collectives = self.args.collectives.split(",") if self.args.collectives else COLLECTIVES
        for _ in range(self.args.repeat):
            for size in sizes:
                for name in collectives:
                    self.run_one(name, size)
        if self.problems:
            raise RuntimeError(f"{len(self.problems)} results wrong (BAD lines); the first: "
                               f"{self.problems[0]}")

    # ------------------------------------------------------------------ user registration
    def plugin_stats(self):
        """hmr's statistics summed over the plugin's devices (hmr_nccl_net_query_stats: NCCL
        loaded libnccl-net-hmr.so; the same handle comes back here)."""
        sys.path.insert(0, HERE)
        import hmr_ctypes
        try:
            plugin = ctypes.CDLL("libnccl-net-hmr.so")
        except OSError as e:
            return {"error": str(e)}
        query = plugin.hmr_nccl_net_query_stats
        query.argtypes = [ctypes.c_int, ctypes.POINTER(hmr_ctypes.DomainStats)]
        query.restype = ctypes.c_int
        total = {}
        for dev in range(16):
            stats = hmr_ctypes.DomainStats()
            stats.size = ctypes.sizeof(stats)
            if query(dev, ctypes.byref(stats)) != 0:
                continue
            for key, value in stats.as_dict().items():
                total[key] = total.get(key, 0) + value
            total["devices"] = total.get("devices", 0) + 1
        return total

    def register(self):
        torch, lib = self.torch, self.nccl.lib
        size = 16 << 20
        n = size // 4
        steps = 20
        results = {}
        for mode in ("plain", "ncclMemAlloc+ncclCommRegister"):
            handles = []
            if mode == "plain":
                send = self.pattern(n, 1000 * self.rank + 9)
                recv = torch.empty(n, device=self.device)
                sptr, rptr = send.data_ptr(), recv.data_ptr()
                allocated = []
            else:
                pointers = [ctypes.c_void_p(), ctypes.c_void_p()]
                for p in pointers:
                    self.nccl.check(lib.ncclMemAlloc(ctypes.byref(p), size), "ncclMemAlloc")
                allocated = pointers
                sptr, rptr = pointers[0].value, pointers[1].value
                src = self.pattern(n, 1000 * self.rank + 9)
                torch.cuda.synchronize()
                cudart_copy(torch, sptr, src, size)
                for p in pointers:
                    h = ctypes.c_void_p()
                    self.nccl.check(lib.ncclCommRegister(self.comm, p, size, ctypes.byref(h)),
                                    "ncclCommRegister", self.comm)
                    handles.append(h)
            expected = self.pattern(n, 9) + self.pattern(n, 1009)
            # One step to connect and settle, then the counted steps.
            self.nccl.check(lib.ncclAllReduce(sptr, rptr, n, NCCL_FLOAT32, NCCL_SUM, self.comm,
                                              self.sptr), "all_reduce", self.comm)
            self.wait_stream("register warm-up")
            before = self.plugin_stats()
            for _ in range(steps):
                self.nccl.check(lib.ncclAllReduce(sptr, rptr, n, NCCL_FLOAT32, NCCL_SUM,
                                                  self.comm, self.sptr), "all_reduce", self.comm)
            self.wait_stream("register steps")
            after = self.plugin_stats()
            got = torch.empty(n, device=self.device)
            cudart_copy(torch, got, rptr, size)
            if not torch.equal(got, expected):
                raise RuntimeError(f"register ({mode}): all_reduce result wrong")
            delta = {k: after.get(k, 0) - before.get(k, 0)
                     for k in ("registrations", "nic_registrations", "cache_hits",
                               "cache_misses", "nic_deregistrations")}
            results[mode] = {"steps": steps, "before": before, "after": after, "delta": delta}
            emit("REG", rank=self.rank, mode=mode, steps=steps,
                 per_step={k: v / steps for k, v in delta.items()}, total_after=after)
            for h in handles:
                self.nccl.check(lib.ncclCommDeregister(self.comm, h), "ncclCommDeregister",
                                self.comm)
            for p in allocated:
                self.nccl.check(lib.ncclMemFree(p), "ncclMemFree")
        return results

    # ------------------------------------------------------------------ a rank killed
    def kill_target(self):
        """Both ranks stream all-reduces, one in flight at a time; rank 1 says when it is in
        the stream (the driver then kills it); rank 0 watches for NCCL's error (the
        asynchronous error, or a failed enqueue) and says when it came, then aborts."""
        torch, lib = self.torch, self.nccl.lib
        n = (64 << 20) // 4
        send = self.pattern(n, 1000 * self.rank + 11)
        recv = torch.empty(n, device=self.device)
        error = ctypes.c_int()
        for i in range(1000000):
            rc = lib.ncclAllReduce(send.data_ptr(), recv.data_ptr(), n, NCCL_FLOAT32, NCCL_SUM,
                                   self.comm, self.sptr)
            how = None if rc == NCCL_SUCCESS else f"enqueue rc {rc}"
            while how is None and not self.stream.query():
                lib.ncclCommGetAsyncError(self.comm, ctypes.byref(error))
                if error.value not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
                    how = (f"async error {error.value} "
                           f"({lib.ncclGetErrorString(error.value).decode()})")
                time.sleep(0.001)
            if how is not None:
                emit("KILL", rank=self.rank, detected_at=time.time(), how=how,
                     last_error=(lib.ncclGetLastError(self.comm) or b"").decode(),
                     completed=i)
                began = time.time()
                lib.ncclCommAbort(self.comm)
                self.comm = None
                emit("KILL", rank=self.rank, abort_s=round(time.time() - began, 3))
                return
            if i == 5:
                emit("KILL", rank=self.rank, streaming_at=time.time())

    def close(self):
        if self.comm:
            self.nccl.check(self.nccl.lib.ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = None


def cudart_copy(torch, dst, src, size):
    """Copies `size` bytes between a tensor and a raw device address (either way) through
    PyTorch: a raw address becomes a tensor view with __cuda_array_interface__."""
    class Raw:
        def __init__(self, ptr):
            self.__cuda_array_interface__ = {"shape": (size // 4,), "typestr": "<f4",
                                             "data": (ptr, False), "version": 3}
    dst_t = dst if isinstance(dst, torch.Tensor) else torch.as_tensor(Raw(dst), device="cuda")
    src_t = src if isinstance(src, torch.Tensor) else torch.as_tensor(Raw(src), device="cuda")
    dst_t.copy_(src_t)
    torch.cuda.synchronize()


def rank_main(args):
    start_watchdog(args.watchdog, f"rank {args.rank} ({args.phase})")
    try:
        rank = Rank(args)
        if args.phase == "bench":
            rank.bench()
        elif args.phase == "register":
            rank.register()
        elif args.phase == "kill":
            rank.kill_target()
        rank.close()
    except Exception as e:  # the driver reads the reason from the log
        emit("FAIL", rank=args.rank, error=str(e))
        sys.stdout.flush()
        os._exit(1)
    emit("DONE", rank=args.rank)
    sys.stdout.flush()
    os._exit(0)  # NCCL's and PyTorch's atexit work is not what this measures


# ---------------------------------------------------------------------------------- driver
TRANSPORTS = {
    # name: environment of both ranks
    "hmr-tcp": {"NCCL_NET_PLUGIN": "hmr", "NCCL_NET": "hmr", "HMR_NCCL_PROVIDER": "tcp"},
    "hmr-shm": {"NCCL_NET_PLUGIN": "hmr", "NCCL_NET": "hmr", "HMR_NCCL_PROVIDER": "shm"},
    "socket": {"NCCL_NET_PLUGIN": "none", "NCCL_NET": "Socket"},
}


def rank_env(transport, rank, extra):
    env = dict(os.environ)
    env.update(TRANSPORTS[transport])
    env.update({
        "NCCL_HOSTID": f"hmr-two-ranks-host-{rank}",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV,REG",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


def launch_pair(args, phase, transport, extra=None, tag=None, only=None):
    """Starts both ranks; `only`: {"sizes": "...", "collectives": "..."} instead of args'."""
    tag = tag or f"{phase}-{transport}"
    id_file = os.path.join(tempfile.mkdtemp(prefix="nccl-id-"), "id")
    procs = []
    for r in range(2):
        log = open(os.path.join(args.out, f"{tag}-rank{r}.log"), "w")
        cmd = [sys.executable, "-u", os.path.abspath(__file__), "--rank", str(r), "--phase",
               phase, "--id-file", id_file, "--watchdog", str(args.rank_watchdog)]
        if args.quick:
            cmd.append("--quick")
        for option in ("sizes", "collectives"):
            value = (only or {}).get(option) or getattr(args, option)
            if value:
                cmd += [f"--{option}", value]
        cmd += ["--repeat", str(args.repeat)]
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                       env=rank_env(transport, r, extra or {})), log))
    return procs, tag


def read_lines(path, kind):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(kind + " "):
                try:
                    out.append(json.loads(line[len(kind) + 1:]))
                except ValueError:
                    pass
    return out


def print_bad_lines(log, rank, limit):
    """Prints the first `limit` of a rank's BAD lines (what check_result found wrong); returns
    them all."""
    bad = read_lines(log, "BAD")
    for record in bad[:limit]:
        print(f"    rank {rank} BAD: {record['text']}", flush=True)
    return bad


def grep(path, text):
    with open(path, errors="replace") as f:
        return [line.rstrip() for line in f if text in line]


def wait_pair(procs, limit_s):
    deadline = time.time() + limit_s
    codes = []
    for proc, log in procs:
        try:
            codes.append(proc.wait(timeout=max(1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
        log.close()
    return codes


def transport_proof(args, tag, transport):
    """NCCL's own lines that say which network carried the traffic."""
    log = os.path.join(args.out, f"{tag}-rank0.log")
    net = "hmr" if transport.startswith("hmr") else "Socket"
    lines = grep(log, f"via NET/{net}")
    loaded = grep(log, "Loaded net plugin hmr") if net == "hmr" else ["(built-in)"]
    using = grep(log, "Using network")
    return lines, loaded, using


def bench_phase(args, failures):
    order = ["hmr-tcp", "socket", "hmr-shm", "hmr-tcp", "socket"]
    if args.quick:
        order = ["hmr-tcp", "socket"]
    if args.transports:
        order = args.transports.split(",")
    results = {}  # (transport, collective, bytes) -> list of rank-0 records
    wrong = {}  # plugin transport -> {(collective, bytes)} some rank found wrong
    for round_index, transport in enumerate(order):
        if time.time() - args.started > args.budget:
            print(f"bench: budget of {args.budget} s spent; {transport} (run {round_index}) "
                  "not run", flush=True)
            continue
        began = time.time()
        procs, tag = launch_pair(args, "bench", transport, tag=f"bench{round_index}-{transport}")
        codes = wait_pair(procs, args.pair_limit)
        lines, loaded, using = transport_proof(args, tag, transport)
        print(f"bench run {round_index} {transport}: exit {codes} in {time.time() - began:.1f} s;"
              f" NCCL chose: {using[:1]}; channels via NET: {len(lines)}", flush=True)
        for line in lines[:4]:
            print("    " + line, flush=True)
        for r in range(2):
            log = os.path.join(args.out, f"{tag}-rank{r}.log")
            for bad in print_bad_lines(log, r, 12):
                if transport.startswith("hmr"):
                    wrong.setdefault(transport, set()).add((bad["collective"], bad["bytes"]))
            for fail in read_lines(log, "FAIL"):
                print(f"    rank {r} FAIL: {fail['error']}", flush=True)
        if codes != [0, 0] or not lines or not loaded:
            failures.append(f"bench {transport} run {round_index}: exit {codes}, "
                            f"{len(lines)} 'via NET' lines, plugin loaded: {bool(loaded)}")
        # A collective is done when every rank is: each pass's figure is the slower rank's
        # (a rooted broadcast's root alone finishes as soon as its sends complete).
        per_rank = [read_lines(os.path.join(args.out, f"{tag}-rank{r}.log"), "RES")
                    for r in range(2)]
        for rec0, rec1 in zip(*per_rank):
            if not (rec0.get("verified") and rec1.get("verified")):
                continue  # (a wrong result times nothing worth a table: its BAD lines say why)
            slower = rec0 if rec0["us"] >= rec1["us"] else rec1
            results.setdefault((transport, slower["collective"], slower["bytes"]), []).append(
                slower)
    write_table(args, results)
    for transport, cases in sorted(wrong.items()):
        check_landed_rerun(args, transport, cases)


CHECK_SUM = re.compile(r"HMR_NCCL_CHECK_SUM (sent|received) (nonce=\w+ tag=-?\d+ ordinal=\d+) "
                       r"bytes=(\d+) sum=(\w+)")


def compare_checksums(logs):
    """The plugin's HMR_NCCL_CHECK_SUM lines of both ranks (each message's checksum at isend and
    at test(), net/landed_bytes_check.h), matched by connection, tag and ordinal: counts of
    messages whose ends agree, differ, or were seen at one end only, and the first that
    differ."""
    sent, received = {}, {}
    for path in logs:
        with open(path, errors="replace") as f:
            for line in f:
                m = CHECK_SUM.search(line)
                if m:
                    (sent if m.group(1) == "sent" else received)[m.group(2)] = (
                        int(m.group(3)), m.group(4))
    both = sent.keys() & received.keys()
    differ = sorted(k for k in both if sent[k] != received[k])
    return {"agree": len(both) - len(differ), "differ": len(differ),
            "sent_only": len(sent.keys() - received.keys()),
            "received_only": len(received.keys() - sent.keys()),
            "first_differing": [f"{k}: sent {sent[k][0]} B sum {sent[k][1]}, received "
                                f"{received[k][0]} B sum {received[k][1]}" for k in differ[:5]]}


def check_landed_rerun(args, transport, cases):
    """The plugin's transport gave wrong results: once more, only those collectives and sizes,
    with the plugin watching whether received bytes change after their receive was reported
    done (HMR_NCCL_CHECK_LANDED: landed late, or written by someone else). Diagnosis only: its
    outcome is printed, not counted as another failure."""
    sizes = ",".join(str(b) for b in sorted({b for _, b in cases}))
    collectives = ",".join(sorted({c for c, _ in cases}))
    began = time.time()
    procs, tag = launch_pair(args, "bench", transport, extra={"HMR_NCCL_CHECK_LANDED": "1"},
                             tag=f"check-landed-{transport}",
                             only={"sizes": sizes, "collectives": collectives})
    codes = wait_pair(procs, args.pair_limit)
    print(f"rerun of {transport} with HMR_NCCL_CHECK_LANDED=1 ({collectives} at {sizes} B): "
          f"exit {codes} in {time.time() - began:.1f} s", flush=True)
    logs = [os.path.join(args.out, f"{tag}-rank{r}.log") for r in range(2)]
    sums = compare_checksums(logs)
    print(f"    messages from host memory, checksummed at isend and at test(): {sums['agree']} "
          f"agree, {sums['differ']} differ (corrupted between the two), {sums['sent_only']} "
          f"sent only, {sums['received_only']} received only", flush=True)
    for line in sums["first_differing"]:
        print("    " + line, flush=True)
    for r in range(2):
        log = logs[r]
        landed = grep(log, "HMR_NCCL_CHECK_LANDED:")
        print(f"    rank {r}: {len(landed)} receives whose bytes changed after they were "
              f"reported done", flush=True)
        for line in landed[:6]:
            print("    " + line, flush=True)
        print_bad_lines(log, r, 6)


def fmt_size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def write_table(args, results):
    sizes = sorted({k[2] for k in results})
    rows = ["| collective | bytes | hmr tcp µs | Socket µs | hmr shm µs | hmr tcp busbw GB/s |"
            " Socket busbw GB/s | hmr shm busbw GB/s | hmr tcp / Socket (busbw) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in COLLECTIVES:
        for size in sizes:
            def best(transport, field, pick):
                recs = results.get((transport, name, size), [])
                return pick(r[field] for r in recs) if recs else None
            cells = [name, fmt_size(size)]
            for t in ("hmr-tcp", "socket", "hmr-shm"):
                v = best(t, "us", min)
                cells.append("-" if v is None else f"{v:.1f}")
            for t in ("hmr-tcp", "socket", "hmr-shm"):
                v = best(t, "busbw_GBps", max)
                cells.append("-" if v is None else f"{v:.3f}")
            h, s = best("hmr-tcp", "busbw_GBps", max), best("socket", "busbw_GBps", max)
            ratio = (h / s) if h and s else None
            cells.append("-" if ratio is None else f"{ratio:.2f}")
            rows.append("| " + " | ".join(cells) + " |")
            if ratio is not None:
                hu, su = best("hmr-tcp", "us", min), best("socket", "us", min)
                print(f"RESULT metric=nccl_two_ranks collective={name} bytes={size} "
                      f"hmr_tcp_us={hu} socket_us={su} hmr_tcp_busbw={h} socket_busbw={s} "
                      f"ratio={ratio:.3f}", flush=True)
    table = "\n".join(rows)
    with open(os.path.join(args.out, "nccl_two_ranks.md"), "w") as f:
        f.write(table + "\n")
    print(table, flush=True)


def register_phase(args, failures):
    procs, tag = launch_pair(args, "register", "hmr-tcp", extra={"NCCL_LOCAL_REGISTER": "1"})
    codes = wait_pair(procs, args.pair_limit)
    print(f"register: exit {codes}", flush=True)
    for rec in read_lines(os.path.join(args.out, f"{tag}-rank0.log"), "REG"):
        print(f"    {rec['mode']}: per step {rec['per_step']}", flush=True)
        print(f"RESULT metric=nccl_register mode={rec['mode'].replace('+', '_')} "
              + " ".join(f"{k}_per_step={v}" for k, v in rec["per_step"].items()), flush=True)
    for r in range(2):
        for fail in read_lines(os.path.join(args.out, f"{tag}-rank{r}.log"), "FAIL"):
            print(f"    rank {r} FAIL: {fail['error']}", flush=True)
    reg_lines = grep(os.path.join(args.out, f"{tag}-rank0.log"), "REG")
    for line in [l for l in reg_lines if "NCCL INFO" in l][:6]:
        print("    " + line, flush=True)
    if codes != [0, 0]:
        failures.append(f"register: exit {codes}")


def kill_phase(args, failures):
    write_timeout = 5.0
    # (over shm nothing reports a dead peer: the plugin watches the peer's process,
    # net/peer_watch.h; the ninth session's run hung there)
    for transport in ("hmr-tcp", "hmr-shm", "socket"):
        extra = {"HMR_NCCL_WRITE_TIMEOUT": str(write_timeout)}
        procs, tag = launch_pair(args, "kill", transport, extra=extra)
        log1 = os.path.join(args.out, f"{tag}-rank1.log")
        deadline = time.time() + 90
        streaming = False
        while time.time() < deadline and procs[1][0].poll() is None:
            if read_lines(log1, "KILL"):
                streaming = True
                break
            time.sleep(0.1)
        if not streaming:
            codes = wait_pair(procs, 1)
            failures.append(f"kill {transport}: rank 1 never started streaming (exit {codes})")
            print(f"kill {transport}: rank 1 never started streaming", flush=True)
            continue
        time.sleep(0.5)
        killed_at = time.time()
        procs[1][0].send_signal(signal.SIGKILL)
        margin = 30.0
        codes = wait_pair(procs, write_timeout + margin)
        recs = read_lines(os.path.join(args.out, f"{tag}-rank0.log"), "KILL")
        detected = [r for r in recs if "detected_at" in r]
        if detected:
            after = detected[0]["detected_at"] - killed_at
            print(f"kill {transport}: rank 0 saw '{detected[0]['how']}' {after:.2f} s after "
                  f"the kill ({detected[0].get('last_error', '')}); exit {codes}", flush=True)
            print(f"RESULT metric=nccl_peer_killed transport={transport} detected_s={after:.2f}"
                  f" write_timeout_s={write_timeout}", flush=True)
            if transport.startswith("hmr") and after > write_timeout + 5:
                failures.append(f"kill {transport}: detected after {after:.1f} s")
        else:
            print(f"kill {transport}: rank 0 saw no error within {write_timeout + margin} s "
                  f"(exit {codes}): a hang", flush=True)
            print(f"RESULT metric=nccl_peer_killed transport={transport} detected_s=none",
                  flush=True)
            if transport.startswith("hmr"):
                failures.append(f"kill {transport}: no error within {write_timeout + margin} s")
        for line in grep(os.path.join(args.out, f"{tag}-rank0.log"), "WARN")[:5]:
            print("    " + line, flush=True)


def driver_main(args):
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    args.started = time.time()
    failures = []
    for phase in args.phases.split(","):
        began = time.time()
        {"bench": bench_phase, "register": register_phase, "kill": kill_phase}[phase](
            args, failures)
        print(f"phase {phase}: {time.time() - began:.1f} s", flush=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), flush=True)
        return 1
    print("nccl_two_ranks: every phase passed", flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="nccl-two-ranks-out")
    parser.add_argument("--phases", default="bench,register,kill")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="seconds after which the bench starts no further run")
    parser.add_argument("--pair-limit", type=float, default=150.0,
                        help="seconds a pair of ranks may run before it is killed")
    parser.add_argument("--rank-watchdog", type=float, default=140.0)
    parser.add_argument("--transports", help="comma list of runs, e.g. hmr-shm,socket "
                        "(default: hmr-tcp,socket,hmr-shm,hmr-tcp,socket)")
    parser.add_argument("--sizes", help="comma list of message sizes in bytes")
    parser.add_argument("--collectives", help="comma list of " + ",".join(COLLECTIVES))
    parser.add_argument("--repeat", type=int, default=1, help="passes over sizes × collectives")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--id-file", help=argparse.SUPPRESS)
    parser.add_argument("--watchdog", type=float, default=140.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args)
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
