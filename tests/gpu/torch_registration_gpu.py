"""A PyTorch CUDA tensor registered through hmr's C ABI (ctypes over libhmr.so), on a GPU
machine.  Checks, each printed as PASS/FAIL with the figures:
  1. hmr_mem_query of the tensor says cuda, device_only, device 0, and the allocation is the
     segment PyTorch's caching allocator got from cudaMalloc (torch.cuda.memory_snapshot());
  2. hmr_mr_reg of the tensor goes through a dma-buf on the sim NIC and is cached; registering
     it again is a cache hit that makes no new NIC registration;
  3. after the tensor is freed and PyTorch's cache emptied (cudaFree of the segment), the old
     registration is never handed out again: a registration at the freed address is refused or
     misses, and a new tensor at the same address misses the cache, then hits.
Usage: HMR_LIBRARY=<libhmr.so.0> python3 torch_registration_gpu.py   (exit 1 on any FAIL)"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hmr_ctypes  # noqa: E402

failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def segment_of(address):
    """The caching allocator's segment (cudaMalloc'ed block) holding address."""
    for segment in torch.cuda.memory_snapshot():
        if segment["address"] <= address < segment["address"] + segment["total_size"]:
            return segment
    return None


def registration_cost(hmr, address, size, rounds=200):
    """hmr_mr_reg + hmr_mr_close of the tensor through ctypes and the C ABI: with caching off
    (the driver exports a dma-buf each time and the NIC registers it) against cached (a hit).
    Python's own cost (about 1 us per ctypes call) is in both; bench/device_registration_bench
    measures the same from C."""
    medians = {}
    for monitor in (b"disabled", None):
        domain = hmr.domain_open(cache_monitor=monitor)
        times = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            mr = hmr.mr_reg(domain, address, size)
            hmr.mr_close(mr)
            times.append(time.perf_counter_ns() - start)
        stats = hmr.stats(domain)
        hmr.domain_close(domain)
        name = "cold" if monitor else "cached"
        medians[name] = statistics.median(times)
        print(f"{name}: median {medians[name] / 1000:.1f} us per hmr_mr_reg+hmr_mr_close of "
              f"{size >> 20} MiB, {stats['nic_registrations']} NIC registrations and "
              f"{stats['cache_hits']} cache hits in {rounds} rounds", flush=True)
        if monitor is None:
            check(stats["nic_registrations"] == 1 and stats["cache_hits"] == rounds - 1,
                  "cached: one NIC registration, every later round a hit")
        else:
            check(stats["nic_registrations"] == rounds, "cold: a NIC registration each round")
    print(f"RESULT metric=cuda_reg_close_us size={size} cold={medians['cold'] / 1000:.1f} "
          f"cached={medians['cached'] / 1000:.1f} "
          f"ratio={medians['cold'] / medians['cached']:.1f}", flush=True)


def main():
    # Plain cudaMalloc segments: with expandable segments the allocator maps VMM memory instead,
    # which the GPU lane covers on its own.
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        sys.exit("run without expandable_segments")
    hmr = hmr_ctypes.Hmr()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    size = 48 << 20
    tensor = torch.full((size,), 7, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    address = tensor.data_ptr()
    segment = segment_of(address)
    print(f"tensor at {address:#x}, {size} bytes; allocator segment "
          f"{segment['address']:#x} + {segment['total_size']}", flush=True)

    attr = hmr.mem_query(address + 4096, 65536)
    print(f"hmr_mem_query: iface {attr.iface}, kind {hmr_ctypes.HMR_MEM_KIND_NAMES[attr.kind]}, "
          f"device {attr.device}, base {attr.base:#x}, alloc_len {attr.alloc_len}, alloc_id "
          f"{attr.alloc_id}, sys_dev {attr.sys_dev.decode()}", flush=True)
    check(attr.iface == hmr_ctypes.HMR_HMEM_CUDA, "iface is cuda")
    check(attr.kind == 2, "kind is device_only")
    check(attr.device == 0, "device 0")
    check(attr.base == segment["address"] and attr.alloc_len == segment["total_size"],
          "the allocation is the caching allocator's cudaMalloc segment")
    check(attr.sys_dev.decode().count(":") == 2, "a PCI bus id")

    # Before any registration of the tensor stays cached: a cached one would keep the
    # allocation's dma-buf export alive, and the cold rounds would share it.
    registration_cost(hmr, address, size)

    domain = hmr.domain_open()
    mr = hmr.mr_reg(domain, address, size)
    info = hmr.mr_query(mr)
    print(f"first registration: path {hmr_ctypes.HMR_MR_PATH_NAMES[info.path]}, cached "
          f"{info.cached}, dmabuf fd {info.dmabuf_fd} offset {info.dmabuf_offset}, key "
          f"{hmr.lib.hmr_mr_key(mr):#x}", flush=True)
    check(info.iface == hmr_ctypes.HMR_HMEM_CUDA and info.path == 1, "registered as a dma-buf")
    check(info.cached == 1, "the registration is cached")
    if info.dmabuf_fd >= 0:
        with open(f"/proc/self/fdinfo/{info.dmabuf_fd}") as fdinfo:
            exporter = [line.strip() for line in fdinfo if line.startswith("exp_name")]
        print(f"fdinfo of the dma-buf: {exporter}", flush=True)
        check(bool(exporter), "the fd is a kernel dma-buf")
    hmr.mr_close(mr)
    before = hmr.stats(domain)
    mr = hmr.mr_reg(domain, address, size)
    hmr.mr_close(mr)
    after_hit = hmr.stats(domain)
    print(f"stats after the second registration: {after_hit}", flush=True)
    check(after_hit["cache_hits"] == before["cache_hits"] + 1, "the second registration hits")
    check(after_hit["nic_registrations"] == before["nic_registrations"],
          "the hit made no NIC registration")

    del tensor
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    check(segment_of(address) is None, "PyTorch returned the segment (cudaFree)")
    rc, reason = hmr.mr_reg_status(domain, address, size)
    after_free = hmr.stats(domain)
    print(f"registration at the freed address: rc {rc} ({reason}); stats {after_free}",
          flush=True)
    check(after_free["cache_hits"] == after_hit["cache_hits"],
          "no cache hit on the freed address")

    again = torch.full((size,), 9, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    print(f"new tensor at {again.data_ptr():#x} (the old one was at {address:#x})", flush=True)
    new_attr = hmr.mem_query(again.data_ptr(), 4096)
    check(new_attr.alloc_id != attr.alloc_id, "the new allocation has a new alloc id")
    mr = hmr.mr_reg(domain, again.data_ptr(), size)
    hmr.mr_close(mr)
    after_new = hmr.stats(domain)
    check(after_new["cache_hits"] == after_free["cache_hits"],
          "the new tensor's registration is not a hit on the old one")
    check(after_new["cache_misses"] == after_free["cache_misses"] + 1,
          "it misses and registers anew")
    mr = hmr.mr_reg(domain, again.data_ptr(), size)
    hmr.mr_close(mr)
    check(hmr.stats(domain)["cache_hits"] == after_new["cache_hits"] + 1,
          "the cache serves the new tensor afterwards")
    print(f"final stats: {hmr.stats(domain)}", flush=True)
    hmr.domain_close(domain)
    print(f"{len(failures)} failed" if failures else "torch registration: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
