// Nanoseconds elapsed, for the registration-time statistics.
#pragma once

#include <chrono>
#include <cstdint>

namespace hmr::core {

class Stopwatch {
 public:
  uint64_t elapsed_ns() const {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - started_)
                                     .count());
  }

 private:
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace hmr::core
