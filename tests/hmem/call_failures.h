// What the vendor call-failure tests below the C ABI share (ROCr, Level Zero, SynapseAI): a
// body run on several threads started together, and the check that a failed Status carries the
// expected code and names the runtime call.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/threads_started_together.h"
#include "util/status.h"

namespace hmr::testing {

inline constexpr int kCallFailureThreads = hmr_test::kThreadsStartedTogether;

using hmr_test::on_threads;

// Empty when `status` failed with `code` and its reason names `call`; otherwise what was wrong.
inline std::string unless_failed_naming(const Status& status, int code, const char* call) {
  if (status.ok()) return std::string("succeeded; expected a failure naming ") + call;
  if (status.code() != code) {
    return "code " + std::to_string(status.code()) + " (expected " + std::to_string(code) +
           "): " + status.reason();
  }
  if (status.reason().find(call) == std::string::npos) {
    return std::string("the reason does not name ") + call + ": " + status.reason();
  }
  return {};
}

}  // namespace hmr::testing
