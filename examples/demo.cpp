// hmr-demo: a short tour of hmr through its C ABI, on the software NIC "sim".
//
//   1. open a domain and show what mr_mode negotiation gave back,
//   2. register host buffers, connect two endpoints, RMA-write and read back, verify each byte,
//   3. measure registration latency for 4 KiB .. 64 MiB, cold (no cache) and cached,
//   4. measure RMA write bandwidth with 1 MiB writes,
//   5. print the domain statistics.
//
// Exit status: 0 when every byte matched, 1 on a mismatch or on any hmr error.
#include <hmr/hmr.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

// Every hmr call returns 0 or a count on success and a negative HMR_E* code on failure;
// hmr_last_error() then says why.  Copy the reason first: it lives until the next hmr call.
[[noreturn]] void fail(const char* call, int rc) {
  const std::string reason = hmr_last_error();
  std::fflush(stdout);  // keep the report in order when both streams go to one place
  std::fprintf(stderr, "\nhmr-demo: %s failed: %s\n  reason: %s\n", call, hmr_strerror(rc),
               reason.c_str());
  std::exit(1);
}
#define CHECK(call)                        \
  do {                                     \
    const int check_rc_ = (call);          \
    if (check_rc_ < 0) fail(#call, check_rc_); \
  } while (0)

std::string mode_names(uint64_t mode) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kBits[] = {{HMR_MR_LOCAL, "LOCAL"},         {HMR_MR_RAW, "RAW"},
               {HMR_MR_VIRT_ADDR, "VIRT_ADDR"}, {HMR_MR_ALLOCATED, "ALLOCATED"},
               {HMR_MR_PROV_KEY, "PROV_KEY"},   {HMR_MR_MMU_NOTIFY, "MMU_NOTIFY"},
               {HMR_MR_RMA_EVENT, "RMA_EVENT"}, {HMR_MR_ENDPOINT, "ENDPOINT"},
               {HMR_MR_HMEM, "HMEM"},           {HMR_MR_COLLECTIVE, "COLLECTIVE"}};
  std::string names;
  for (const auto& entry : kBits) {
    if ((mode & entry.bit) == 0) continue;
    if (!names.empty()) names += "|";
    names += entry.name;
  }
  return names.empty() ? "none" : names;
}

std::string access_names(uint64_t access) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kBits[] = {{HMR_READ, "READ"},
               {HMR_WRITE, "WRITE"},
               {HMR_SEND, "SEND"},
               {HMR_RECV, "RECV"},
               {HMR_REMOTE_READ, "REMOTE_READ"},
               {HMR_REMOTE_WRITE, "REMOTE_WRITE"}};
  std::string names;
  for (const auto& entry : kBits) {
    if ((access & entry.bit) == 0) continue;
    if (!names.empty()) names += "|";
    names += entry.name;
  }
  return names;
}

std::string size_name(size_t bytes) {
  char text[32];
  if (bytes >= MiB) {
    std::snprintf(text, sizeof text, "%zu MiB", bytes / MiB);
  } else {
    std::snprintf(text, sizeof text, "%zu KiB", bytes / KiB);
  }
  return text;
}

std::string duration_name(double ns) {
  char text[32];
  if (ns < 1e3) {
    std::snprintf(text, sizeof text, "%.0f ns", ns);
  } else if (ns < 1e6) {
    std::snprintf(text, sizeof text, "%.1f us", ns / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.2f ms", ns / 1e6);
  }
  return text;
}

double elapsed_ns(Clock::time_point since) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

// Nearest-rank percentile of an ascending vector.
double percentile(const std::vector<double>& sorted, double fraction) {
  size_t rank = static_cast<size_t>(fraction * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// What a peer needs to reach a target MR: its key and the address of its first byte (the
// virtual address in VIRT_ADDR domains, 0 otherwise; hmr_mr_raw_attr says which).
struct RemoteMr {
  uint64_t key;
  uint64_t base_addr;
};

RemoteMr describe_remote(hmr_mr* mr) {
  uint8_t raw_key[16];
  size_t raw_key_size = sizeof raw_key;
  RemoteMr remote{};
  CHECK(hmr_mr_raw_attr(mr, &remote.base_addr, raw_key, &raw_key_size, 0));
  remote.key = hmr_mr_key(mr);
  if (remote.key == HMR_KEY_NOTAVAIL) {
    std::fprintf(stderr, "hmr-demo: the target MR has no 64-bit key\n");
    std::exit(1);
  }
  return remote;
}

hmr_mr* register_buffer(hmr_domain* domain, const char* role, std::vector<uint8_t>& buffer,
                        uint64_t access) {
  hmr_mr* mr = nullptr;
  // offset must be 0 (reserved by fi_mr); requested_key is ignored under PROV_KEY.
  CHECK(hmr_mr_reg(domain, buffer.data(), buffer.size(), access, 0, 0, 0, &mr, nullptr));
  std::printf("    %-7s %7s  access %s", role, size_name(buffer.size()).c_str(),
              access_names(access).c_str());
  if (access & (HMR_REMOTE_READ | HMR_REMOTE_WRITE)) {
    // What the peer needs: a key and an address (hmr_mr_raw_attr says which base to use).
    const RemoteMr remote = describe_remote(mr);
    std::printf("  ->  peer uses key %#" PRIx64 " at address %#" PRIx64, remote.key,
                remote.base_addr);
  }
  std::printf("\n");
  return mr;
}

// Counts the bytes that differ and reports the first one.
size_t count_mismatches(const char* what, const std::vector<uint8_t>& expected,
                        const std::vector<uint8_t>& actual) {
  size_t mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == actual[i]) continue;
    if (mismatches == 0) {
      std::printf("    MISMATCH in %s at byte %zu: expected %#x, found %#x\n", what, i,
                  expected[i], actual[i]);
    }
    ++mismatches;
  }
  return mismatches;
}

void section(const char* title) { std::printf("\n%s\n", title); }

// --------------------------------------------------------------------------- the tour ----

// sim models a verbs-like NIC here: it wants virtual addresses, mapped memory and keys it
// chooses itself.  The application says what it can honour; LOCAL it need not honour, because
// hmr registers local buffers by itself.
constexpr const char* kNicOptions = "require=VIRT_ADDR|ALLOCATED|PROV_KEY";
constexpr uint64_t kAppMode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;

// The demo's domain attributes: the sim NIC, the mr_mode the demo supports, all else default.
hmr_domain_attr demo_domain_attr() {
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.nic_options = kNicOptions;
  attr.mr_mode = kAppMode;
  return attr;
}

// 1. A domain is hmr's fi_domain: one NIC, the mr_mode contract, the limits.
hmr_domain* open_domain(bool* cache_on) {
  section("[1] Open a domain on the sim NIC");
  hmr_domain_attr attr = demo_domain_attr();
  // cache_max_count, cache_max_size, cache_monitor left 0/NULL: the defaults (or FI_MR_CACHE_*).
  hmr_domain* domain = nullptr;
  CHECK(hmr_domain_open(&attr, &domain));
  std::printf("    NIC options                 : %s\n", kNicOptions);
  std::printf("    mr_mode the app supports    : %s\n", mode_names(kAppMode).c_str());
  std::printf("    mr_mode the app must honour : %s   (hmr emulates LOCAL and HMEM)\n",
              mode_names(attr.mr_mode).c_str());
  std::printf("    limits                      : %zu-byte keys, %zu segments per MR, %zu MRs "
              "open at once\n",
              attr.mr_key_size, attr.mr_iov_limit, attr.mr_cnt);
  *cache_on = attr.cache_max_count > 0;
  if (*cache_on) {
    std::printf("    registration cache          : on, monitor %s, up to %zu regions and %s\n",
                attr.cache_monitor, attr.cache_max_count, size_name(attr.cache_max_size).c_str());
  } else {
    std::printf("    registration cache          : off (monitor %s)\n",
                attr.cache_monitor != nullptr ? attr.cache_monitor : "none");
  }
  return domain;
}

// 2. Register, connect, write, read back, verify.  Returns the number of wrong bytes.
size_t rma_round_trip(hmr_domain* domain, hmr_ep* initiator) {
  constexpr size_t kBytes = 4 * MiB;
  section("[2] Register host buffers, RMA-write them to a peer and read them back");
  std::vector<uint8_t> source(kBytes);
  std::vector<uint8_t> target(kBytes, 0);
  std::vector<uint8_t> check(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);

  hmr_mr* source_mr = register_buffer(domain, "source", source, HMR_WRITE);
  hmr_mr* target_mr =
      register_buffer(domain, "target", target, HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  hmr_mr* check_mr = register_buffer(domain, "check", check, HMR_READ);
  const RemoteMr remote = describe_remote(target_mr);

  CHECK(hmr_ep_write(initiator, source.data(), kBytes, hmr_mr_desc(source_mr),
                     remote.base_addr, remote.key));
  CHECK(hmr_ep_read(initiator, check.data(), kBytes, hmr_mr_desc(check_mr), remote.base_addr,
                    remote.key));
  std::printf("    wrote source -> target with hmr_ep_write, read target -> check with "
              "hmr_ep_read\n");

  const size_t mismatches = count_mismatches("target", source, target) +
                            count_mismatches("check", source, check);
  if (mismatches == 0) {
    std::printf("    verified: all %zu bytes of target and of check equal source: OK\n",
                kBytes);
  } else {
    std::printf("    FAILED: %zu bytes differ\n", mismatches);
  }
  CHECK(hmr_mr_close(check_mr));
  CHECK(hmr_mr_close(target_mr));
  CHECK(hmr_mr_close(source_mr));
  return mismatches;
}

// Median and p99 of `pairs` hmr_mr_reg + hmr_mr_close pairs of [buffer, buffer+size); only
// the registration is timed.  Stops early (after 20) when the time budget is spent.
struct Latency {
  size_t pairs = 0;
  double median_ns = 0;
  double p99_ns = 0;
};

Latency measure_registration(hmr_domain* domain, uint8_t* buffer, size_t size) {
  constexpr int kPairs = 200;
  constexpr int kWarmup = 5;           // the first pair of a cached domain is its miss
  constexpr double kBudgetNs = 0.25e9;  // per size and domain, so the demo stays short
  std::vector<double> reg_ns;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kWarmup + kPairs; ++i) {
    hmr_mr* mr = nullptr;
    const Clock::time_point t0 = Clock::now();
    CHECK(hmr_mr_reg(domain, buffer, size, HMR_REMOTE_WRITE | HMR_REMOTE_READ, 0, 0, 0, &mr,
                     nullptr));
    const Clock::time_point t1 = Clock::now();
    CHECK(hmr_mr_close(mr));
    if (i < kWarmup) continue;
    reg_ns.push_back(static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    if (elapsed_ns(start) > kBudgetNs && reg_ns.size() >= 20) break;
  }
  std::sort(reg_ns.begin(), reg_ns.end());
  return {reg_ns.size(), percentile(reg_ns, 0.5), percentile(reg_ns, 0.99)};
}

// What timing one call adds by itself: the median of two back-to-back clock reads, so a
// figure of a few tens of ns can be read against it.
double clock_overhead_ns() {
  std::vector<double> samples;
  for (int i = 0; i < 1000; ++i) {
    const Clock::time_point t0 = Clock::now();
    const Clock::time_point t1 = Clock::now();
    samples.push_back(static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
  }
  std::sort(samples.begin(), samples.end());
  return percentile(samples, 0.5);
}

// 3. What a registration costs: cold (every hmr_mr_reg goes to the NIC) and cached (the
// domain's registration cache already holds a registration containing the range).
void registration_latency(hmr_domain* cached_domain, bool cache_on) {
  constexpr size_t kSizes[] = {4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB};
  section("[3] Registration latency: hmr_mr_reg of host memory (each followed by hmr_mr_close)");

  // The same NIC, with the cache turned off: every registration is a NIC registration.
  hmr_domain_attr attr = demo_domain_attr();
  attr.cache_monitor = "disabled";
  hmr_domain* cold_domain = nullptr;
  CHECK(hmr_domain_open(&attr, &cold_domain));

  std::vector<uint8_t> buffer(64 * MiB, 1);  // touched, so every page is mapped
  std::printf("    %8s  %s  %s\n", "", "------------- cold -------------",
              "------------ cached ------------");
  std::printf("    %8s  %6s  %11s  %11s  %6s  %11s  %11s\n", "size", "pairs", "median", "p99",
              "pairs", "median", "p99");
  for (const size_t size : kSizes) {
    const Latency cold = measure_registration(cold_domain, buffer.data(), size);
    std::printf("    %8s  %6zu  %11s  %11s", size_name(size).c_str(), cold.pairs,
                duration_name(cold.median_ns).c_str(), duration_name(cold.p99_ns).c_str());
    if (cache_on) {
      const Latency hit = measure_registration(cached_domain, buffer.data(), size);
      std::printf("  %6zu  %11s  %11s\n", hit.pairs, duration_name(hit.median_ns).c_str(),
                  duration_name(hit.p99_ns).c_str());
    } else {
      std::printf("  %6s  %11s  %11s\n", "-", "cache off", "-");
    }
  }
  CHECK(hmr_domain_close(cold_domain));
  std::printf("    cold:   a domain opened with cache_monitor=\"disabled\": each hmr_mr_reg is a NIC\n"
              "            registration.  sim pins nothing, so size barely matters; a real NIC pins\n"
              "            every page, which costs microseconds to milliseconds and grows with size.\n"
              "    cached: the demo's domain; after the first (a miss) every hmr_mr_reg of the same\n"
              "            memory is a cache hit and never reaches the NIC.  Hits of host memory\n"
              "            take the one-pass hit path (C ABI -> cache and back: no lock, no\n"
              "            allocation).  Each figure includes %s of reading the clock twice.\n",
              duration_name(clock_overhead_ns()).c_str());
}

// 4. Bytes per second through the sim NIC (a memory copy by the kernel, not a wire).
void write_bandwidth(hmr_domain* domain, hmr_ep* initiator) {
  constexpr size_t kMessage = 1 * MiB;
  constexpr size_t kSlots = 8;  // the target is 8 MiB; writes cycle through it
  constexpr int kMaxWrites = 4000;
  constexpr double kBudgetNs = 0.5e9;
  section("[4] RMA write bandwidth, 1 MiB per hmr_ep_write");
  std::vector<uint8_t> source(kMessage, 0xab);
  std::vector<uint8_t> target(kSlots * kMessage, 0);
  hmr_mr* source_mr = nullptr;
  hmr_mr* target_mr = nullptr;
  CHECK(hmr_mr_reg(domain, source.data(), source.size(), HMR_WRITE, 0, 0, 0, &source_mr,
                   nullptr));
  CHECK(hmr_mr_reg(domain, target.data(), target.size(), HMR_REMOTE_WRITE, 0, 0, 0, &target_mr,
                   nullptr));
  const RemoteMr remote = describe_remote(target_mr);
  void* desc = hmr_mr_desc(source_mr);
  for (size_t slot = 0; slot < kSlots; ++slot) {  // warm-up: fault in the target pages
    CHECK(hmr_ep_write(initiator, source.data(), kMessage, desc,
                       remote.base_addr + slot * kMessage, remote.key));
  }
  int writes = 0;
  const Clock::time_point start = Clock::now();
  while (writes < kMaxWrites && (writes % 64 != 0 || elapsed_ns(start) < kBudgetNs)) {
    const uint64_t addr = remote.base_addr + static_cast<uint64_t>(writes % kSlots) * kMessage;
    CHECK(hmr_ep_write(initiator, source.data(), kMessage, desc, addr, remote.key));
    ++writes;
  }
  const double ns = elapsed_ns(start);
  const double bytes = static_cast<double>(writes) * static_cast<double>(kMessage);
  std::printf("    %d writes of 1 MiB in %.1f ms: %.2f GB/s (%.2f GiB/s)\n", writes, ns / 1e6,
              bytes / ns, bytes / ns * 1e9 / (1024.0 * 1024.0 * 1024.0));
  std::printf("    (sim moves bytes with process_vm_writev inside one process: this is memory\n"
              "     bandwidth, not a network; a real NIC is measured with hmr-perftest later)\n");
  CHECK(hmr_mr_close(target_mr));
  CHECK(hmr_mr_close(source_mr));
}

// 5. Statistics are an API, not only log lines.
void print_stats(hmr_domain* domain) {
  section("[5] Domain statistics (hmr_domain_query_stats)");
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  CHECK(hmr_domain_query_stats(domain, &stats));
  const struct {
    const char* name;
    uint64_t value;
    const char* meaning;
  } kRows[] = {
      {"mr_open", stats.mr_open, "MR handles open now"},
      {"mr_bytes", stats.mr_bytes, "bytes covered by open MR handles"},
      {"registrations", stats.registrations, "successful hmr_mr_reg* calls"},
      {"registration_errors", stats.registration_errors, "failed hmr_mr_reg* calls"},
      {"nic_registrations", stats.nic_registrations, "registrations made on the NIC"},
      {"nic_deregistrations", stats.nic_deregistrations, "deregistrations on the NIC"},
      {"registration_ns", stats.registration_ns, "total ns spent registering on the NIC"},
      {"deregistration_ns", stats.deregistration_ns, "total ns spent deregistering on the NIC"},
      {"cache_pressure_evictions", stats.cache_pressure_evictions,
       "unused registrations given back when the NIC refused one"},
      {"nic_refusal_retries", stats.nic_refusal_retries, "registrations retried after that"},
      {"nic_refusals", stats.nic_refusals, "refusals passed on: nothing idle was left"},
      {"rma_ops", stats.rma_ops, "RMA operations through endpoints"},
      {"rma_bytes", stats.rma_bytes, "bytes moved by them"},
      {"rma_errors", stats.rma_errors, "RMA operations that failed"},
      {"cache_hits", stats.cache_hits, "registrations served by the cache"},
      {"cache_misses", stats.cache_misses, "registrations the cache had to make"},
      {"cache_invalidations", stats.cache_invalidations, "entries dropped: their memory changed"},
      {"cache_evictions", stats.cache_evictions, "unused entries dropped for the limits"},
      {"cache_uncached", stats.cache_uncached, "cacheable registrations not cached"},
      {"cache_regions", stats.cache_regions, "registrations cached now"},
      {"cache_bytes", stats.cache_bytes, "bytes they cover"},
      {"cache_in_use", stats.cache_in_use, "cached registrations some MR holds"},
  };
  for (const auto& row : kRows) {
    std::printf("    %-20s %14" PRIu64 "   %s\n", row.name, row.value, row.meaning);
  }
  if (stats.nic_registrations > 0) {
    std::printf("    => mean time per NIC registration: %s\n",
                duration_name(static_cast<double>(stats.registration_ns) /
                              static_cast<double>(stats.nic_registrations))
                    .c_str());
  }
}

}  // namespace

int main() {
  const Clock::time_point start = Clock::now();
  const uint32_t version = hmr_version();
  std::printf("hmr %u.%u.%u demo: memory registration with fi_mr semantics\n", version >> 16,
              (version >> 8) & 0xff, version & 0xff);
  std::printf("NIC: \"sim\", a software NIC inside this process (no RDMA hardware needed).\n");

  bool cache_on = false;
  hmr_domain* domain = open_domain(&cache_on);

  // Two endpoints of the same domain: `initiator` issues RMA, `target` is where it lands.
  hmr_ep* target = nullptr;
  hmr_ep* initiator = nullptr;
  CHECK(hmr_ep_open(domain, nullptr, &target));
  CHECK(hmr_ep_open(domain, nullptr, &initiator));
  CHECK(hmr_ep_connect(initiator, target));

  const size_t mismatches = rma_round_trip(domain, initiator);
  registration_latency(domain, cache_on);
  write_bandwidth(domain, initiator);
  print_stats(domain);

  // Close in reverse order of opening: an endpoint that is the target of another cannot be
  // closed first, and a domain cannot be closed while anything of it is open.
  CHECK(hmr_ep_close(initiator));
  CHECK(hmr_ep_close(target));
  CHECK(hmr_domain_close(domain));

  std::printf("\n%s in %.1f s\n", mismatches == 0 ? "All checks passed" : "FAILED",
              elapsed_ns(start) / 1e9);
  return mismatches == 0 ? 0 : 1;
}
