"""A cached register + close through the Python package hmr, through ctypes over libhmr (the
GPU lane's helper, tests/gpu/hmr_ctypes.py) and through the C ABI (c_hit_loop.c, compiled
here), in one run; issue 27's target is package <= 0.15 x ctypes.  Ends with RESULT lines;
--profile adds a PROFILE line: where a package hit's time goes (perf, cpu-clock samples).

    PYTHONPATH=build-py/python /usr/bin/python3 bench/python/bench_register.py [--profile]

Debian's /usr/bin/python3 is named because it has numpy and torch (python3 on PATH may be
another interpreter).  The libhmr measured is the one the package loaded."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy

import hmr

HERE = Path(__file__).resolve().parent
SOURCE_TREE = HERE.parents[1]
sys.path.insert(0, str(SOURCE_TREE / "tests" / "gpu"))
import hmr_ctypes  # noqa: E402  (the test helper, reused as the ctypes baseline)

ROUNDS = 5
TARGET_RATIO = 0.15


def loaded_libhmr():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libhmr.so" in path:
                return path
    sys.exit("bench_register: libhmr is not loaded (is the package importable?)")


def best_ns(step, iterations):
    for _ in range(1000):
        step()
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            step()
        best = min(best, (time.perf_counter_ns() - start) / iterations)
    return best


def sources():
    """The objects measured; a CUDA tensor too where PyTorch sees a GPU (issue 27, item 7)."""
    import torch  # not in the profiled child, whose start-up would swamp the profile
    objects = {"numpy": numpy.zeros(4096, dtype=numpy.uint8),
               "torch_cpu": torch.zeros(1024, dtype=torch.float32)}
    if torch.cuda.is_available():
        objects["torch_cuda"] = torch.zeros(1024, dtype=torch.float32, device="cuda")
    return objects


def package_steps(domain, objects):
    register = domain.register
    return {name: (lambda obj=obj: register(obj).close()) for name, obj in objects.items()}


def ctypes_steps(lib, domain, objects):
    """What a ctypes user writes: the address and length from the object, then reg + close."""
    access = hmr_ctypes.HMR_REMOTE_READ | hmr_ctypes.HMR_REMOTE_WRITE
    array = objects["numpy"]

    def numpy_step():
        lib.mr_close(lib.mr_reg(domain, array.ctypes.data, array.nbytes, access))

    def torch_step(tensor):
        return lambda: lib.mr_close(lib.mr_reg(domain, tensor.data_ptr(),
                                               tensor.numel() * tensor.element_size(), access))

    steps = {"numpy": numpy_step}
    steps.update({name: torch_step(obj) for name, obj in objects.items() if name != "numpy"})
    return steps


def c_abi_ns(libhmr, iterations):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None
    libdir = os.path.dirname(libhmr)
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "c_hit_loop")
        subprocess.run([compiler, "-O2", "-std=gnu11", f"-I{SOURCE_TREE / 'include'}",
                        str(HERE / "c_hit_loop.c"), "-o", exe, f"-L{libdir}",
                        f"-Wl,-rpath,{libdir}", "-l:" + os.path.basename(libhmr)],
                       check=True)
        out = subprocess.run([exe, str(iterations)], check=True, capture_output=True,
                             text=True).stdout
    return float(out.strip())


def profile_line(iterations):
    """perf over a child that only runs package hits of the NumPy array."""
    if not shutil.which("perf"):
        return "PROFILE skipped: perf is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        record = subprocess.run(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-o", data, "--",
             sys.executable, __file__, "--loop", str(iterations)],
            capture_output=True, text=True)
        if record.returncode != 0:
            return f"PROFILE skipped: perf record failed: {record.stderr.strip()[:200]}"
        report = subprocess.run(
            ["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,symbol",
             "--percent-limit", "2"], capture_output=True, text=True).stdout
    parts = []
    for line in report.splitlines():
        fields = line.split()
        if not line.strip() or line.lstrip().startswith("#") or not fields[0].endswith("%"):
            continue
        dso, symbol = fields[1], " ".join(f for f in fields[3:] if f != "-")
        parts.append(f"{fields[0]} {symbol} ({dso})")
    return "PROFILE numpy register+close (self time, >=2%): " + "; ".join(parts[:12])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=300000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--loop", type=int, help=argparse.SUPPRESS)  # the profiled child
    args = parser.parse_args()
    if args.loop:
        with hmr.Domain("sim") as domain:
            step = package_steps(domain, {"numpy": numpy.zeros(4096, numpy.uint8)})["numpy"]
            for _ in range(args.loop):
                step()
        return

    objects = sources()
    torch = sys.modules["torch"]
    libhmr = loaded_libhmr()
    lib = hmr_ctypes.Hmr(libhmr)
    print(f"hmr {hmr.__version__} ({hmr.__file__}), libhmr {libhmr}, Python "
          f"{sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}")
    empty = best_ns(lambda: None, args.iterations)
    with hmr.Domain("sim") as domain:
        package = {name: best_ns(step, args.iterations)
                   for name, step in package_steps(domain, objects).items()}
    ctypes_domain = lib.domain_open()
    try:
        via_ctypes = {name: best_ns(step, args.iterations // 4)
                      for name, step in ctypes_steps(lib, ctypes_domain, objects).items()}
    finally:
        lib.domain_close(ctypes_domain)
    c_abi = c_abi_ns(libhmr, args.iterations * 10)
    for name in objects:
        ratio = package[name] / via_ctypes[name]
        print(f"{name:10s} package {package[name]:7.1f} ns   ctypes {via_ctypes[name]:7.1f} ns"
              f"   ratio {ratio:.3f}")
    print(f"C ABI (c_hit_loop.c): {c_abi} ns; a Python call of a no-op lambda: {empty:.1f} ns")
    if args.profile:
        print(profile_line(args.iterations * 10))
    for name in objects:
        ratio = package[name] / via_ctypes[name]
        print(f"RESULT metric=py_register_close_ns source={name} package={package[name]:.1f} "
              f"ctypes={via_ctypes[name]:.1f} ratio={ratio:.3f} target={TARGET_RATIO} "
              f"met={'yes' if ratio <= TARGET_RATIO else 'no'} c_abi={c_abi}")
    print(f"RESULT metric=c_abi_register_close_ns value={c_abi}")
    print(f"RESULT metric=py_call_overhead_ns value={empty:.1f}")


if __name__ == "__main__":
    main()
