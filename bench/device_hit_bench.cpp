// What a cached registration of device memory costs a caller of the C ABI (issue 26), beside a
// host hit in the same run: hmr_mr_reg + hmr_mr_key + hmr_mr_close of 4 KiB inside a cached
// CUDA allocation (hmr_mem_alloc) and inside a cached host buffer, on the sim NIC.
//
// The driver's part is measured and taken out: the same process times the one question a hit
// asks (cuPointerGetAttributes of memory type, device, BUFFER_ID and managed, on the same
// pointer) straight from the driver, and the driver calls per hit are counted where the
// driver can count them (the fake's fake_cuda_call_count).  "own" is hmr's time: the hit
// less its driver calls.  The anchor beside it is libfabric's way, one cuPointerGetAttribute
// (BUFFER_ID) per hit (its CUDA monitor's valid()), timed alone.
//
//   RESULT metric=device_hit_ns hmr=<ns> own=<ns> host_hit=<ns> own_ratio=<own/host>
//          driver_calls_per_hit=<n|unknown> driver_call_ns=<ns> frees_reported=<0|1>
//          target_ratio=2 met=<yes|no>
// frees_reported=1: run with HMR_CUDA_FREES_REPORTED=1 (the application reports its frees, so
// a hit asks the driver nothing: the target is then 0 calls per hit, else 1).
//   RESULT metric=device_hit_vs_one_query_ns hmr=<ns> one_query=<ns> ratio=<hmr/one_query>
//
// Medians of 9 rounds of `iterations` each (default 200000), device and host alternating.
// Usage: hmr_device_hit_bench [iterations] [--profile] (--profile: only device hits, for perf).  The driver is libcuda.so.1, or HMR_CUDA_LIBRARY
// (a fake one in CI's smoke test, where the figures say what hmr costs with a driver call of
// the fake's price).  Exits 77 when no CUDA memory can be allocated.
#include <dlfcn.h>
#include <hmr/hmr.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr size_t kLen = 4096;
constexpr int kRounds = 9;

// The driver's own entry points, opened as hmr opens them (dlopen, never linked).
using PointerGetAttributes = int (*)(unsigned, int*, void**, unsigned long long);
using PointerGetAttribute = int (*)(void*, int, unsigned long long);
using CallCount = int (*)(const char*);
// cuda.h's CUpointer_attribute values (CUDA 13 headers): the four hmr asks at once.
constexpr int kMemoryType = 2, kBufferId = 7, kIsManaged = 8, kDeviceOrdinal = 9;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "hmr_device_hit_bench: %s: %s\n", what, hmr_last_error());
  std::exit(1);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename Body>
double ns_per(int iterations, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) body(i);
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(end - start).count() / iterations;
}

void reg_close(hmr_domain* domain, const uint8_t* base, int i) {
  hmr_mr* mr = nullptr;
  // Four ranges inside the one registration, as a transport's slices of a buffer.
  if (hmr_mr_reg(domain, base + (i & 3) * 1024, kLen, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
    die("hmr_mr_reg");
  }
  if (hmr_mr_key(mr) == HMR_KEY_NOTAVAIL) die("hmr_mr_key");
  if (hmr_mr_close(mr) != 0) die("hmr_mr_close");
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200000;
  const bool profile = argc > 2 && std::strcmp(argv[2], "--profile") == 0;
  const char* library = std::getenv("HMR_CUDA_LIBRARY");
  void* driver = dlopen(library != nullptr ? library : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  auto get_attributes =
      driver ? reinterpret_cast<PointerGetAttributes>(dlsym(driver, "cuPointerGetAttributes"))
             : nullptr;
  auto get_attribute =
      driver ? reinterpret_cast<PointerGetAttribute>(dlsym(driver, "cuPointerGetAttribute"))
             : nullptr;
  auto call_count = driver ? reinterpret_cast<CallCount>(dlsym(driver, "fake_cuda_call_count"))
                           : nullptr;

  void* device = nullptr;
  if (get_attributes == nullptr ||
      hmr_mem_alloc(HMR_HMEM_CUDA, 0, 1 << 20, HMR_MEM_DEVICE_ONLY, &device) != 0) {
    std::printf("no CUDA memory here: %s\n", hmr_last_error());
    return 77;
  }
  std::vector<uint8_t> host(1 << 20, 1);

  hmr_domain_attr attr{};
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) die("hmr_domain_open");
  const auto* device_base = static_cast<const uint8_t*>(device);
  // The misses: each buffer registered whole once (as NCCL registers a buffer with
  // regIsGlobal), so every timed registration is a slice inside one cached entry.
  for (const void* whole : {static_cast<const void*>(device_base),
                            static_cast<const void*>(host.data())}) {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain, whole, 1 << 20, kAccess, 0, 0, 0, &mr, nullptr) != 0) die("miss");
    hmr_mr_close(mr);
  }

  // The one question of a device hit, straight from the driver.
  unsigned memory_type = 0;
  int ordinal = -1;
  unsigned long long buffer_id = 0;
  unsigned managed = 0;
  int attributes[] = {kMemoryType, kDeviceOrdinal, kBufferId, kIsManaged};
  void* data[] = {&memory_type, &ordinal, &buffer_id, &managed};
  const auto address = reinterpret_cast<unsigned long long>(device);

  if (profile) {  // device hits alone, for perf record
    const double ns = ns_per(iterations, [&](int i) { reg_close(domain, device_base, i); });
    std::printf("info: %.1f ns per device hit\n", ns);
    return 0;
  }
  std::vector<double> device_ns, host_ns, call_ns, one_query_ns;
  int calls_before = call_count != nullptr ? call_count("*") : 0;
  for (int round = 0; round < kRounds; ++round) {
    device_ns.push_back(ns_per(iterations, [&](int i) { reg_close(domain, device_base, i); }));
    host_ns.push_back(ns_per(iterations, [&](int i) { reg_close(domain, host.data(), i); }));
    call_ns.push_back(ns_per(iterations, [&](int) {
      if (get_attributes(4, attributes, data, address) != 0) die("cuPointerGetAttributes");
    }));
    if (get_attribute != nullptr) {
      one_query_ns.push_back(ns_per(iterations, [&](int) {
        if (get_attribute(&buffer_id, kBufferId, address) != 0) die("cuPointerGetAttribute");
      }));
    }
  }
  // Driver calls per hit: every call the fake counted, less the timed direct ones.
  double calls_per_hit = -1;
  if (call_count != nullptr) {
    const int direct = kRounds * iterations * (get_attribute != nullptr ? 2 : 1);
    calls_per_hit = static_cast<double>(call_count("*") - calls_before - direct) /
                    (static_cast<double>(kRounds) * iterations);
  }
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  if (hmr_domain_query_stats(domain, &stats) != 0) die("hmr_domain_query_stats");

  const double device_hit = median(device_ns);
  const double host_hit = median(host_ns);
  const double driver_call = median(call_ns);
  const double calls = calls_per_hit >= 0 ? calls_per_hit : 1.0;  // (hmr asks one at most)
  const double own = device_hit - calls * driver_call;
  std::printf("info: %llu cache hits, %llu misses, %llu NIC registrations in the run\n",
              static_cast<unsigned long long>(stats.cache_hits),
              static_cast<unsigned long long>(stats.cache_misses),
              static_cast<unsigned long long>(stats.nic_registrations));
  char calls_text[32];
  if (calls_per_hit >= 0) {
    std::snprintf(calls_text, sizeof calls_text, "%.2f", calls_per_hit);
  } else {
    std::snprintf(calls_text, sizeof calls_text, "unknown");
  }
  const char* reported_text = std::getenv("HMR_CUDA_FREES_REPORTED");
  const bool reported = reported_text != nullptr && std::strcmp(reported_text, "1") == 0;
  const double target_calls = reported ? 0.0 : 1.0;
  std::printf("RESULT metric=device_hit_ns hmr=%.1f own=%.1f host_hit=%.1f own_ratio=%.2f "
              "driver_calls_per_hit=%s driver_call_ns=%.1f frees_reported=%d target_ratio=2 "
              "met=%s\n",
              device_hit, own, host_hit, own / host_hit, calls_text, driver_call, reported ? 1 : 0,
              // (a hundredth of a call: the round's few calls outside the hits)
              own <= 2 * host_hit && (calls_per_hit < 0 || calls_per_hit <= target_calls + 0.01)
                  ? "yes"
                  : "no");
  if (!one_query_ns.empty()) {
    const double one_query = median(one_query_ns);
    std::printf("RESULT metric=device_hit_vs_one_query_ns hmr=%.1f one_query=%.1f ratio=%.2f\n",
                device_hit, one_query, device_hit / one_query);
  }
  hmr_domain_close(domain);
  hmr_mem_free(HMR_HMEM_CUDA, device);
  return 0;
}
