// What a registration costs when the NIC is full of idle cached registrations (docs/
// semantics.md, "Under pressure"), through the public C ABI: hmr_mr_reg + hmr_mr_close of
// distinct page-sized buffers on a callback NIC that holds `capacity` registrations and
// refuses the next (-HMR_ENOSPC), against the same on a NIC without a limit (a plain miss),
// and a cached hit of one buffer, interleaved rounds, medians.  The NIC's own calls cost a
// few ns (a counter), so the figures are hmr's.  With --stated the NIC states its limit
// (mr_cnt), so hmr gives back before it asks instead of after a refusal.
//   hmr_pressure_bench [--capacity N] [--rounds R] [--stated]
// prints  RESULT metric=registration_under_pressure_ns limit=<refused|stated> evicting=<ns>
//         miss=<ns> hit=<ns> ratio=<evicting/miss>
// Then, per host monitor: a buffer registered and closed (idle in the cache) is unmapped, and
// the time from munmap's return until the NIC's deregistration callback ran is taken, with no
// further hmr call (cache/deferred_reaper.h); the target is 100 ms:
//         RESULT metric=freed_registration_released_us monitor=<m> median=<us> max=<us>
// And what a refusal costs when every registration the NIC holds is in use by an open MR
// (the caller gets -HMR_ENOSPC): with all of them on live memory, and with one of them on
// memory freed while it stays open (its entry is out of the cache, kept by the MR; the
// refusal must not wait for the application's close):
//         RESULT metric=refusal_all_in_use_us monitor=<m> live=<us> one_freed=<us>
#include <hmr/hmr.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

struct Nic {
  size_t capacity = 0;  // 0: no limit
  std::atomic<size_t> held{0};  // (the release test's deregistration runs on hmr's thread)
  size_t most_held = 0;
  uint64_t next_key = 1;
};

int nic_register(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char* reason,
                 size_t reason_size) {
  auto& nic = *static_cast<Nic*>(context);
  if (nic.capacity != 0 && nic.held >= nic.capacity) {
    std::snprintf(reason, reason_size, "full");
    return -HMR_ENOSPC;
  }
  nic.most_held = std::max(nic.most_held, ++nic.held);
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = nic.next_key++;
  return 0;
}

int nic_deregister(void* context, const hmr_nic_mr*, char*, size_t) {
  --static_cast<Nic*>(context)->held;
  return 0;
}

struct Domain {
  Domain(Nic& nic, bool stated, const char* monitor = nullptr) {
    std::memset(&callbacks, 0, sizeof callbacks);
    callbacks.size = sizeof callbacks;
    callbacks.context = &nic;
    callbacks.key_size = 8;
    callbacks.mr_cnt = stated ? nic.capacity : 0;
    callbacks.reg_va = nic_register;
    callbacks.dereg = nic_deregister;
    hmr_domain_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.nic = "callback";
    attr.nic_handle = &callbacks;
    attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
    attr.cache_max_count = 1u << 20;
    attr.cache_monitor = monitor;
    if (hmr_domain_open(&attr, &domain) != 0) {
      std::fprintf(stderr, "hmr_domain_open: %s\n", hmr_last_error());
      std::exit(1);
    }
  }
  ~Domain() { hmr_domain_close(domain); }
  hmr_nic_callbacks callbacks;
  hmr_domain* domain = nullptr;
};

// Median ns of hmr_mr_reg + hmr_mr_close over `buffers` taken in turn, `per_round` of them.
double reg_close_ns(hmr_domain* domain, const std::vector<uint8_t*>& buffers, size_t per_round,
                    size_t* next) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < per_round; ++i) {
    hmr_mr* mr = nullptr;
    uint8_t* buffer = buffers[(*next)++ % buffers.size()];
    if (hmr_mr_reg(domain, buffer, kPage, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
      std::fprintf(stderr, "hmr_mr_reg: %s\n", hmr_last_error());
      std::exit(1);
    }
    hmr_mr_close(mr);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() / static_cast<double>(per_round);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds from munmap's return until the NIC let go of the freed buffer's idle
// registration, with no hmr call in between; one sample per round.
std::vector<double> release_after_free_us(const char* monitor, int rounds) {
  Nic nic;
  Domain domain(nic, false, monitor);
  std::vector<double> samples;
  for (int r = 0; r < rounds; ++r) {
    void* buffer = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    std::memset(buffer, 1, 4 * kPage);
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain.domain, buffer, 4 * kPage, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
      std::fprintf(stderr, "hmr_mr_reg: %s\n", hmr_last_error());
      std::exit(1);
    }
    hmr_mr_close(mr);
    munmap(buffer, 4 * kPage);
    const auto freed = std::chrono::steady_clock::now();
    const auto give_up = freed + std::chrono::seconds(5);
    while (nic.held.load() != 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                freed).count());
  }
  return samples;
}

// Median microseconds of a refused hmr_mr_reg on a NIC of 16 registrations, all held by open
// MRs, the first of them on a buffer unmapped after its registration when `one_freed`.
double refusal_all_in_use_us(const char* monitor, bool one_freed, int rounds) {
  constexpr size_t kCapacity = 16;
  Nic nic;
  nic.capacity = kCapacity;
  Domain domain(nic, false, monitor);
  auto* mapping = static_cast<uint8_t*>(mmap(nullptr, 2 * (kCapacity + 1) * kPage,
                                             PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                             -1, 0));
  std::memset(mapping, 1, 2 * (kCapacity + 1) * kPage);
  std::vector<hmr_mr*> open;
  for (size_t i = 0; i < kCapacity; ++i) {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain.domain, mapping + 2 * i * kPage, kPage, kAccess, 0, 0, 0, &mr,
                   nullptr) != 0) {
      std::fprintf(stderr, "hmr_mr_reg: %s\n", hmr_last_error());
      std::exit(1);
    }
    open.push_back(mr);
  }
  if (one_freed) munmap(mapping, kPage);
  std::vector<double> samples;
  for (int r = 0; r < rounds; ++r) {
    hmr_mr* refused = nullptr;
    const auto start = std::chrono::steady_clock::now();
    const int rc = hmr_mr_reg(domain.domain, mapping + 2 * kCapacity * kPage, kPage, kAccess, 0,
                              0, 0, &refused, nullptr);
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                start).count());
    if (rc != -HMR_ENOSPC) {
      std::fprintf(stderr, "expected a refusal, got %d: %s\n", rc, hmr_last_error());
      std::exit(1);
    }
  }
  for (hmr_mr* mr : open) hmr_mr_close(mr);
  munmap(mapping, 2 * (kCapacity + 1) * kPage);
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  size_t capacity = 256;
  int rounds = 9;
  bool stated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--capacity" && i + 1 < argc) capacity = std::strtoul(argv[++i], nullptr, 10);
    else if (arg == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (arg == "--stated") stated = true;
    else {
      std::fprintf(stderr, "usage: %s [--capacity N] [--rounds R] [--stated]\n", argv[0]);
      return 2;
    }
  }
  // Four times the NIC's capacity in distinct buffers, each page with a gap page after it: in
  // turn, every registration of the bounded NIC finds it full of idle entries.
  const size_t count = 4 * capacity;
  const size_t per_round = 2 * count;
  auto* mapping = static_cast<uint8_t*>(mmap(nullptr, 2 * count * kPage, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  std::memset(mapping, 1, 2 * count * kPage);
  std::vector<uint8_t*> buffers;
  for (size_t i = 0; i < count; ++i) buffers.push_back(mapping + 2 * i * kPage);

  Nic bounded;
  bounded.capacity = capacity;
  Nic unbounded;
  Domain pressured(bounded, stated);
  std::vector<double> evicting, miss, hit;
  size_t next_pressured = 0;
  reg_close_ns(pressured.domain, buffers, per_round, &next_pressured);  // fills the NIC
  for (int r = 0; r < rounds; ++r) {
    evicting.push_back(reg_close_ns(pressured.domain, buffers, per_round, &next_pressured));
    {
      // A fresh domain each round, so each registration is a first one: a plain miss.
      Domain plain(unbounded, false);
      size_t next = 0;
      miss.push_back(reg_close_ns(plain.domain, buffers, count, &next));
      const std::vector<uint8_t*> one(1, buffers[0]);
      next = 0;
      hit.push_back(reg_close_ns(plain.domain, one, per_round, &next));
    }
  }
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  hmr_domain_query_stats(pressured.domain, &stats);
  const double e = median(evicting), m = median(miss), h = median(hit);
  std::printf("bounded NIC of %zu: %llu given back, %llu retries after refusals, %llu refusals "
              "passed on, most held %zu\n",
              capacity, static_cast<unsigned long long>(stats.cache_pressure_evictions),
              static_cast<unsigned long long>(stats.nic_refusal_retries),
              static_cast<unsigned long long>(stats.nic_refusals), bounded.most_held);
  std::printf("RESULT metric=registration_under_pressure_ns limit=%s evicting=%.1f miss=%.1f "
              "hit=%.1f ratio=%.2f\n",
              stated ? "stated" : "refused", e, m, h, e / m);
  munmap(mapping, 2 * count * kPage);
  for (const char* monitor : {"memhooks", "userfaultfd"}) {
    const std::vector<double> us = release_after_free_us(monitor, 200);
    std::printf("RESULT metric=freed_registration_released_us monitor=%s median=%.1f max=%.1f\n",
                monitor, median(us), *std::max_element(us.begin(), us.end()));
  }
  for (const char* monitor : {"memhooks", "userfaultfd"}) {
    const double live = refusal_all_in_use_us(monitor, false, 25);
    const double one_freed = refusal_all_in_use_us(monitor, true, 25);
    std::printf("RESULT metric=refusal_all_in_use_us monitor=%s live=%.1f one_freed=%.1f\n",
                monitor, live, one_freed);
  }
  return 0;
}
