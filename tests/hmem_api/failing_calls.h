// What the CUDA driver-failure tests share: a fake entry point made to fail for a scope, a
// body run on several threads started together, the check that a call failed with the
// expected code and a reason naming the driver call, and a callback NIC that counts what it
// holds (so a test sees a registration left behind).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"
#include "tests/threads_started_together.h"

namespace hmr_hmem_test {

inline constexpr int kFailureThreads = hmr_test::kThreadsStartedTogether;

// Makes one fake driver entry point fail until the end of the scope.
class FailingCall {
 public:
  FailingCall(const char* name, int code) : name_(name) { fake_cuda().set_failure(name, code); }
  ~FailingCall() { fake_cuda().set_failure(name_, 0); }
  FailingCall(const FailingCall&) = delete;
  FailingCall& operator=(const FailingCall&) = delete;

 private:
  const char* name_;
};

using hmr_test::on_threads;

// Empty when rc is -code and the last error names `call`; otherwise what was wrong.
inline std::string reason_unless(int rc, int code, const char* call) {
  if (rc != -code) {
    return std::string("rc ") + std::to_string(rc) + " (expected -" + std::to_string(code) +
           "): " + hmr_last_error();
  }
  if (std::strstr(hmr_last_error(), call) == nullptr) {
    return std::string("the reason does not name ") + call + ": " + hmr_last_error();
  }
  return {};
}

// A callback NIC that hands out keys and counts the registrations it holds.
struct CountingNic {
  std::atomic<int> held{0};
  std::atomic<uint64_t> next_key{1};

  static int reg(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
    auto& nic = *static_cast<CountingNic*>(context);
    nic.held.fetch_add(1);
    return hmr_test::hand_out_key(mr, nic.next_key);
  }
  static int dereg(void* context, const hmr_nic_mr*, char*, size_t) {
    static_cast<CountingNic*>(context)->held.fetch_sub(1);
    return 0;
  }
  hmr_nic_callbacks callbacks(uint64_t caps) { return callback_nic(this, caps, reg, dereg); }
};

}  // namespace hmr_hmem_test
