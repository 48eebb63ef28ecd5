// The CUDA context calls on the dma-buf registration path made to fail, from several threads at
// once.  The export needs a current context; a thread without one gets the device's primary
// context for the call (cuCtxGetCurrent, cuCtxSetCurrent, and cuCtxSetCurrent again to put the
// caller's back).  A refusal fails the registration with a reason naming the call, leaves no
// dma-buf fd, no NIC registration and no context current on the caller's thread; and the same
// memory registers once the driver works again.
#include <string>
#include <vector>

#include "tests/hmem_api/failing_calls.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

constexpr size_t kBytes = 65536;
// cuCtxGetCurrent documents CUDA_ERROR_DEINITIALIZED and CUDA_ERROR_NOT_INITIALIZED;
// cuCtxSetCurrent also CUDA_ERROR_INVALID_CONTEXT (cuda.h, CUDA 13.0).
constexpr int kCudaErrorDeinitialized = 4;
constexpr int kCudaErrorInvalidContext = 201;

struct Case {
  const char* entry_point;
  int code;
};

class CudaContextFailures : public ::testing::TestWithParam<Case> {};

// Device 0 memory (the fake's device with dma-buf) through the sim NIC's dma-buf path only.
TEST_P(CudaContextFailures, DmabufRegistrationsFailCleanlyAndRecover) {
  const Case failing_case = GetParam();
  DomainPtr domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  std::vector<std::unique_ptr<FakeAllocation>> memory;
  for (int i = 0; i < kFailureThreads; ++i) {
    memory.push_back(std::make_unique<FakeAllocation>(0, kBytes));
  }
  const int fds_before = open_fd_count();
  {
    FailingCall failing(failing_case.entry_point, failing_case.code);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      hmr_mr* mr = nullptr;
      std::string why = reason_unless(
          register_attr(domain.get(), memory[static_cast<size_t>(i)]->get(), kBytes,
                        HMR_HMEM_SYSTEM, 0, 0, &mr),
          HMR_EIO, failing_case.entry_point);
      if (mr != nullptr) why += " (and *mr was written)";
      if (fake_cuda().current_context_device() != -1) why += " (a context left current)";
      return why;
    });
    for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  }
  EXPECT_EQ(open_fd_count(), fds_before) << "a dma-buf fd left open";
  hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.nic_registrations, 0u);

  std::vector<MrPtr> mrs(kFailureThreads);
  const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    hmr_mr* mr = nullptr;
    if (register_attr(domain.get(), memory[static_cast<size_t>(i)]->get(), kBytes,
                      HMR_HMEM_SYSTEM, 0, 0, &mr) != 0) {
      return hmr_last_error();
    }
    mrs[static_cast<size_t>(i)].reset(mr);
    if (mr_info(mr).path != HMR_MR_PATH_DMABUF) return "not a dma-buf registration";
    if (fake_cuda().current_context_device() != -1) return "a context left current";
    return {};
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  for (MrPtr& held : mrs) held.reset();
  ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();
  stats = stats_of(domain.get());
  EXPECT_EQ(stats.nic_registrations, stats.nic_deregistrations);
  EXPECT_EQ(open_fd_count(), fds_before);
}

INSTANTIATE_TEST_SUITE_P(EachCall, CudaContextFailures,
                         ::testing::Values(Case{"cuCtxGetCurrent", kCudaErrorDeinitialized},
                                           Case{"cuCtxSetCurrent", kCudaErrorInvalidContext}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.entry_point);
                         });

// The restore of the caller's context (the second cuCtxSetCurrent of the export) refused once:
// the registration itself succeeded and stands, the failure is logged, and the next
// registration on that thread works.
TEST(CudaContextRestoreFailure, ARegistrationStandsWhenTheRestoreFails) {
  DomainPtr domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  FakeAllocation first(0, kBytes);
  FakeAllocation second(0, kBytes);
  fake_cuda().set_failure_once("cuCtxSetCurrent", kCudaErrorInvalidContext, 2);
  hmr_mr* mr = nullptr;
  const int rc = register_attr(domain.get(), first.get(), kBytes, HMR_HMEM_SYSTEM, 0, 0, &mr);
  fake_cuda().set_failure("cuCtxSetCurrent", 0);
  ASSERT_EQ(rc, 0) << hmr_last_error();
  MrPtr owned(mr);
  EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_DMABUF);
  MrPtr next = register_ok(domain.get(), second.get(), kBytes);
  EXPECT_TRUE(next);
}

}  // namespace
}  // namespace hmr_hmem_test
