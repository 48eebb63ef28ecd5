// What a cached hit costs threads that start after the process has had 64 threads
// (util/thread_slot.h hands each of the first 64 an exclusive slot and never takes one back;
// later threads share slots and count their hits in the entry).  Through the C ABI on the sim
// NIC: two threads hit one cached buffer at once; then 64 short-lived threads each make one
// registration and exit (a service's per-request threads); then two new threads hit again.
//
//   RESULT metric=hit_after_thread_churn threads=2 early_ns=<ns> late_ns=<ns> ratio=<late/early>
//          churned_threads=64
//
// ns: wall time per hmr_mr_reg + hmr_mr_close on each thread (the slower one), median of 7
// rounds of `iterations` (default 2000000) per thread, the threads running together.
//   hmr_thread_churn_bench [iterations] [threads: 1-4, default 2]
#include <hmr/hmr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr int kRounds = 7;
constexpr int kChurn = 64;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "hmr_thread_churn_bench: %s: %s\n", what, hmr_last_error());
  std::exit(1);
}

void hit(hmr_domain* domain, const void* buffer) {
  hmr_mr* mr = nullptr;
  if (hmr_mr_reg(domain, buffer, 4096, kAccess, 0, 0, 0, &mr, nullptr) != 0) die("hmr_mr_reg");
  if (hmr_mr_close(mr) != 0) die("hmr_mr_close");
}

// `threads` new threads hitting together, `rounds` times `iterations` each: median ns per hit.
double hits_on_new_threads(hmr_domain* domain, const void* buffer, int iterations,
                           int threads) {
  std::vector<double> per_round;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> ns(threads);
    std::vector<std::thread> running;
    for (int t = 0; t < threads; ++t) {
      running.emplace_back([&, t] {
        hit(domain, buffer);  // this thread's slot is assigned here
        ready.fetch_add(1);
        while (!go.load()) {
        }
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) hit(domain, buffer);
        ns[t] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                    .count() /
                iterations;
      });
    }
    while (ready.load() < threads) {
    }
    go = true;
    for (std::thread& thread : running) thread.join();
    per_round.push_back(*std::max_element(ns.begin(), ns.end()));
  }
  std::sort(per_round.begin(), per_round.end());
  return per_round[per_round.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2000000;
  const int threads = argc > 2 ? std::clamp(std::atoi(argv[2]), 1, 4) : 2;
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) die("hmr_domain_open");
  std::vector<char> buffer(1 << 20);
  hit(domain, buffer.data());  // the miss: cached from here on

  // Early: the process has had 1 + threads * kRounds threads (< 64), each with its own slot.
  const double early = hits_on_new_threads(domain, buffer.data(), iterations, threads);
  for (int i = 0; i < kChurn; ++i) {
    std::thread([&] { hit(domain, buffer.data()); }).join();
  }
  const double late = hits_on_new_threads(domain, buffer.data(), iterations, threads);
  std::printf("RESULT metric=hit_after_thread_churn threads=%d early_ns=%.1f late_ns=%.1f "
              "ratio=%.2f churned_threads=%d\n",
              threads, early, late, late / early, kChurn);
  if (hmr_domain_close(domain) != 0) die("hmr_domain_close");
  return 0;
}
