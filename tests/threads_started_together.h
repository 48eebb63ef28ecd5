// A body run on several threads that start together, for the call-failure tests: the threads
// meet before any calls `body`, so the calls overlap inside hmr as an application's would.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace hmr_test {

inline constexpr int kThreadsStartedTogether = 4;

// Runs body(i) for i in [0, kThreadsStartedTogether) on threads started together; what each
// returned (empty: fine).
template <typename Body>
std::vector<std::string> on_threads(Body body) {
  std::vector<std::string> failures(kThreadsStartedTogether);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreadsStartedTogether; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreadsStartedTogether) std::this_thread::yield();
      failures[static_cast<size_t>(i)] = body(i);
    });
  }
  for (std::thread& t : threads) t.join();
  return failures;
}

}  // namespace hmr_test
