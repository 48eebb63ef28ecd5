// One thread against two on the same work, measured the way a busy machine allows: runs of a
// fixed window alternate (1, 2, 2, 1, ...) so drift hits both sides alike, throughput counts
// what every thread finished inside its window, and the answer is a median of pairs.
// Shared by the benches that compare hmr's and UCX's caches (cache_vs_ucx_bench.cpp,
// api_hit_vs_ucx.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace hmr_bench {

inline double median_of(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 != 0 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

struct Scaling {
  double mops_1 = NAN;  // medians, Mops/s in total
  double mops_2 = NAN;
  double ratio = NAN;   // median of the per-pair ratios (2 threads / 1)
  size_t ops = 0;       // operations done over every run, for the caller's own checks
};

// work(thread, first, ops) does `ops` operations starting at position `first` of thread
// `thread`'s own walk (thread 0 or 1).
inline Scaling paired_scaling(std::chrono::milliseconds window, int pairs,
                              const std::function<void(int, size_t, size_t)>& work) {
  using Clock = std::chrono::steady_clock;
  constexpr size_t kChunk = 256;
  Scaling scaling;
  auto run = [&](int threads) {
    std::atomic<bool> ready{threads == 1}, go{false}, stop{false};
    size_t helper_ops = 0;
    std::thread helper;
    if (threads == 2) {
      helper = std::thread([&] {
        ready.store(true, std::memory_order_release);
        while (!go.load(std::memory_order_acquire)) {
        }
        size_t done = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          work(1, done, kChunk);
          done += kChunk;
        }
        helper_ops = done;
      });
    }
    while (!ready.load(std::memory_order_acquire)) {
    }
    const auto started = Clock::now();
    go.store(true, std::memory_order_release);
    size_t done = 0;
    do {
      work(0, done, kChunk);
      done += kChunk;
    } while (Clock::now() - started < window);
    const double elapsed_us =
        std::chrono::duration<double, std::micro>(Clock::now() - started).count();
    stop.store(true, std::memory_order_relaxed);
    if (helper.joinable()) helper.join();
    scaling.ops += done + helper_ops;
    return static_cast<double>(done + helper_ops) / elapsed_us;
  };
  std::vector<double> ones, twos, ratios;
  for (int pair = 0; pair < pairs; ++pair) {
    double one = 0, two = 0;
    if (pair % 2 == 0) {
      one = run(1);
      two = run(2);
    } else {
      two = run(2);
      one = run(1);
    }
    ones.push_back(one);
    twos.push_back(two);
    ratios.push_back(two / one);
  }
  scaling.mops_1 = median_of(ones);
  scaling.mops_2 = median_of(twos);
  scaling.ratio = median_of(ratios);
  return scaling;
}

}  // namespace hmr_bench
