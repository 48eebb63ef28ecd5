// What registering GPU memory costs a caller of the C ABI, cold against cached: hmr_mr_reg +
// hmr_mr_key + hmr_mr_close of memory from hmr_mem_alloc(HMR_HMEM_CUDA), on the sim NIC, through
// each export path:
//   dmabuf       the NIC imports a dma-buf (cold: the driver's query and export, the NIC's
//                import; cached: a hit, which asks the driver only for the buffer id)
//   host_shadow  the NIC cannot reach the GPU and copies are allowed (cold: a host buffer is
//                mapped, pinned, filled from the GPU and registered; cached: a hit)
// "cold" is a domain with caching off (the anchor: what every registration costs without
// hmr's cache), "cached" the default domain.  Prints per path and size, medians of `rounds`:
//   RESULT metric=device_reg_close_us path=<p> bytes=<n> cold=<us> cached=<us> ratio=<cold/cached>
// Usage: hmr_device_registration_bench [rounds]   (default 200).  Exits 77 when no CUDA device
// can be used (HMR_CUDA_LIBRARY may name a fake driver, as the smoke test in CI does).
#include <hmr/hmr.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Path {
  const char* name;
  const char* nic_options;
  uint64_t flags;
};

constexpr Path kPaths[] = {
    {"dmabuf", "dmabuf=1", 0},
    {"host_shadow", "dmabuf=0;peer_direct=0", HMR_DOMAIN_ALLOW_HMEM_COPY},
};
constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;

struct Measured {
  double median_us = 0;
  hmr_domain_stats stats{};
};

bool measure(const Path& path, bool cached, void* memory, size_t bytes, int rounds,
             Measured& out) {
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.nic_options = path.nic_options;
  attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;
  attr.cache_monitor = cached ? nullptr : "disabled";
  attr.flags = path.flags;
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) {
    std::fprintf(stderr, "hmr_domain_open (%s): %s\n", path.name, hmr_last_error());
    return false;
  }
  std::vector<double> times;
  times.reserve(static_cast<size_t>(rounds));
  bool ok = true;
  for (int i = 0; i < rounds && ok; ++i) {
    const auto start = std::chrono::steady_clock::now();
    hmr_mr* mr = nullptr;
    ok = hmr_mr_reg(domain, memory, bytes, kAccess, 0, 0, 0, &mr, nullptr) == 0;
    if (ok) {
      (void)hmr_mr_key(mr);  // read, as a caller would (a call into libhmr.so: never elided)
      ok = hmr_mr_close(mr) == 0;
    }
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  if (!ok) std::fprintf(stderr, "%s registration: %s\n", path.name, hmr_last_error());
  out.stats.size = sizeof out.stats;
  ok = ok && hmr_domain_query_stats(domain, &out.stats) == 0;
  hmr_domain_close(domain);
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  out.median_us = times[times.size() / 2];
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  if (rounds < 1) {
    std::fprintf(stderr, "usage: %s [rounds >= 1]\n", argv[0]);
    return 2;
  }
  std::printf("hmr_mr_reg + hmr_mr_key + hmr_mr_close of cuda device 0 memory (hmr_mem_alloc), "
              "sim NIC, median of %d rounds\n", rounds);
  std::printf("%-12s %10s %10s %10s %8s %9s %9s\n", "path", "bytes", "cold_us", "cached_us",
              "ratio", "nic_regs", "hits");
  for (const size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) {
    void* memory = nullptr;
    if (hmr_mem_alloc(HMR_HMEM_CUDA, 0, bytes, HMR_MEM_DEVICE_ONLY, &memory) != 0) {
      std::printf("SKIP: no usable CUDA device: %s\n", hmr_last_error());
      return 77;
    }
    for (const Path& path : kPaths) {
      Measured cold;
      Measured cached;
      if (!measure(path, false, memory, bytes, rounds, cold) ||
          !measure(path, true, memory, bytes, rounds, cached)) {
        hmr_mem_free(HMR_HMEM_CUDA, memory);
        return 1;
      }
      std::printf("%-12s %10zu %10.2f %10.2f %8.1f %9llu %9llu\n", path.name, bytes,
                  cold.median_us, cached.median_us, cold.median_us / cached.median_us,
                  static_cast<unsigned long long>(cached.stats.nic_registrations),
                  static_cast<unsigned long long>(cached.stats.cache_hits));
      if (cold.stats.nic_registrations != static_cast<uint64_t>(rounds) ||
          cached.stats.nic_registrations != 1 ||
          cached.stats.cache_hits != static_cast<uint64_t>(rounds - 1)) {
        std::fprintf(stderr, "%s: expected %d NIC registrations cold, 1 cached and %d hits\n",
                     path.name, rounds, rounds - 1);
        hmr_mem_free(HMR_HMEM_CUDA, memory);
        return 1;
      }
      std::printf("RESULT metric=device_reg_close_us path=%s bytes=%zu cold=%.2f cached=%.2f "
                  "ratio=%.1f\n", path.name, bytes, cold.median_us, cached.median_us,
                  cold.median_us / cached.median_us);
    }
    hmr_mem_free(HMR_HMEM_CUDA, memory);
  }
  return 0;
}
