// The CUDA driver calls behind the iface's start, its device probes, its primary contexts and
// its segment lookup made to fail, against the fake driver: each failure is answered with a
// clear code and a reason naming the call (a probe says "no" and why), leaves nothing retained
// or current, and the iface works once the driver does.  The registration paths that reach
// these calls through the C ABI are in tests/hmem_api/cuda_*_failures_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/hmem/fake_cuda_library.h"
#include "tests/threads_started_together.h"

namespace hmr::cuda {
namespace {

using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::PointerInfo;
using hmr::testing::as_pointer;
using hmr::testing::fake_cuda;

// Codes each call documents (cuda.h, CUDA 13.0): cuDriverGetVersion INVALID_VALUE;
// cuDeviceGetCount, cuDeviceGet and cuDeviceGetAttribute INVALID_DEVICE / NOT_INITIALIZED /
// DEINITIALIZED; cuDevicePrimaryCtxRetain OUT_OF_MEMORY; cuDevicePrimaryCtxRelease
// INVALID_DEVICE; cuMemGetAddressRange NOT_FOUND / INVALID_CONTEXT.
constexpr int kInvalidValue = 1;
constexpr int kOutOfMemory = 2;
constexpr int kNotInitialized = 3;
constexpr int kDeinitialized = 4;
constexpr int kInvalidDevice = 101;
constexpr int kInvalidContext = 201;

bool names(const Status& status, const char* call) {
  return status.reason().find(call) != std::string::npos;
}

using CudaDriverFailures = hmr::testing::FakeCudaTest;

TEST_F(CudaDriverFailures, StartFailsNamingTheProbeAndSucceedsOnceTheDriverDoes) {
  struct Probe {
    const char* call;
    int code;
    int hmr_code;
  };
  for (const Probe probe : {Probe{"cuDriverGetVersion", kInvalidValue, HMR_EINVAL},
                            Probe{"cuDeviceGetCount", kDeinitialized, HMR_EIO}}) {
    SCOPED_TRACE(probe.call);
    CudaIface iface("/nonexistent/hmr-test-sysfs");
    fake_cuda().set_failure(probe.call, probe.code);
    const Status failed = iface.init();
    fake_cuda().set_failure(probe.call, 0);
    EXPECT_EQ(failed.code(), probe.hmr_code);
    EXPECT_TRUE(names(failed, probe.call)) << failed.reason();
    EXPECT_TRUE(names(failed, "cuda iface unavailable")) << failed.reason();
    EXPECT_FALSE(iface.device_count().ok()) << "a failed start left the iface usable";
    ASSERT_TRUE(iface.init().ok());
    Result<int> count = iface.device_count();
    ASSERT_TRUE(count.ok());
    EXPECT_EQ(*count, FAKE_CUDA_DEVICE_COUNT);
  }
}

// The PCI identity is read at start with cuDeviceGet and cuDeviceGetAttribute; when either
// fails the device still works, it only has no sys_dev.
TEST_F(CudaDriverFailures, AnUnreadableDeviceIdentityLeavesSysDevEmpty) {
  for (const char* call : {"cuDeviceGet", "cuDeviceGetAttribute"}) {
    SCOPED_TRACE(call);
    CudaIface iface("/nonexistent/hmr-test-sysfs");
    fake_cuda().set_failure(call, kInvalidDevice);
    const Status started = iface.init();
    fake_cuda().set_failure(call, 0);
    ASSERT_TRUE(started.ok()) << started.reason();
    const unsigned long long device = alloc(1, 4096);
    Result<PointerInfo> info = iface.query(as_pointer(device), 4096);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->sys_dev, "");
    EXPECT_EQ(info->device, DeviceId{1});
  }
}

// Capability probes: a failed cuDeviceGetAttribute is a "no" naming the call, never a "yes";
// a failed cuDeviceGet fails the question naming it; both answer again once the driver does.
TEST_F(CudaDriverFailures, ProbesSayNoNamingTheFailedCall) {
  init();
  fake_cuda().set_failure("cuDeviceGetAttribute", kNotInitialized);
  Result<DeviceCapabilities> refused = iface_.capabilities(DeviceId{0});
  fake_cuda().set_failure("cuDeviceGetAttribute", 0);
  ASSERT_TRUE(refused.ok()) << refused.status().reason();
  EXPECT_FALSE(refused->dmabuf.supported);
  EXPECT_NE(refused->dmabuf.reason.find("cuDeviceGetAttribute(DMA_BUF_SUPPORTED)"),
            std::string::npos)
      << refused->dmabuf.reason;
  EXPECT_FALSE(refused->peer_direct.supported);
  EXPECT_NE(refused->peer_direct.reason.find("cuDeviceGetAttribute(GPU_DIRECT_RDMA_SUPPORTED)"),
            std::string::npos)
      << refused->peer_direct.reason;

  fake_cuda().set_failure("cuDeviceGet", kInvalidDevice);
  Result<DeviceCapabilities> failed = iface_.capabilities(DeviceId{0});
  fake_cuda().set_failure("cuDeviceGet", 0);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_ENODEV);
  EXPECT_TRUE(names(failed.status(), "cuDeviceGet(0)")) << failed.status().reason();

  Result<DeviceCapabilities> answered = iface_.capabilities(DeviceId{0});
  ASSERT_TRUE(answered.ok());
  EXPECT_TRUE(answered->dmabuf.supported) << answered->dmabuf.reason;
}

// The primary context is retained on first use, from whichever thread comes first.  Refused
// (on every thread at once): each copy fails naming cuDevicePrimaryCtxRetain, nothing is
// retained and no context is left current.  Then the threads race to retain: exactly one
// retain is kept, even where the losers' hand-back is refused.
TEST_F(CudaDriverFailures, PrimaryContextRetainFailsOnEveryThreadAndIsKeptOnceAfter) {
  init();
  const unsigned long long device = alloc(0, 1 << 20);
  fake_cuda().set_failure("cuDevicePrimaryCtxRetain", kOutOfMemory);
  std::vector<std::string> failures = hmr_test::on_threads([&](int i) {
    const char byte = 1;
    const Status failed = iface_.copy_to_device(const_cast<void*>(as_pointer(device + 64 * i)),
                                                &byte, 1);
    std::string why;
    if (failed.code() != HMR_ENOMEM) why = "code " + std::to_string(failed.code());
    if (!names(failed, "cuDevicePrimaryCtxRetain")) why += " reason: " + failed.reason();
    if (fake_cuda().current_context_device() != -1) why += " (a context left current)";
    return why;
  });
  fake_cuda().set_failure("cuDevicePrimaryCtxRetain", 0);
  for (size_t i = 0; i < failures.size(); ++i) EXPECT_EQ(failures[i], "") << i;
  EXPECT_EQ(fake_cuda().primary_retains(0), 0);

  fake_cuda().set_failure("cuDevicePrimaryCtxRelease_v2", kInvalidDevice);
  failures = hmr_test::on_threads([&](int i) {
    const char byte = 2;
    const Status copied = iface_.copy_to_device(const_cast<void*>(as_pointer(device + 64 * i)),
                                                &byte, 1);
    return copied.ok() ? std::string() : copied.reason();
  });
  fake_cuda().set_failure("cuDevicePrimaryCtxRelease_v2", 0);
  for (size_t i = 0; i < failures.size(); ++i) EXPECT_EQ(failures[i], "") << i;
  EXPECT_GE(fake_cuda().primary_retains(0), 1);
}

// Releasing the retained primary contexts when the iface goes: a refusal is logged, never a
// crash, and a new iface on the same driver works.
TEST_F(CudaDriverFailures, ARefusedReleaseAtTheEndIsSurvived) {
  {
    CudaIface iface("/nonexistent/hmr-test-sysfs");
    ASSERT_TRUE(iface.init().ok());
    Result<void*> memory = iface.mem_alloc(DeviceId{0}, 4096, hmem::MemoryKind::device_only);
    ASSERT_TRUE(memory.ok()) << memory.status().reason();
    ASSERT_EQ(fake_cuda().primary_retains(0), 1);
    fake_cuda().set_failure("cuDevicePrimaryCtxRelease_v2", kInvalidDevice);
  }
  fake_cuda().set_failure("cuDevicePrimaryCtxRelease_v2", 0);
  EXPECT_EQ(fake_cuda().primary_retains(0), 1) << "the driver refused the release";
  init();
  Result<void*> memory = iface_.mem_alloc(DeviceId{0}, 4096, hmem::MemoryKind::device_only);
  ASSERT_TRUE(memory.ok()) << memory.status().reason();
  EXPECT_TRUE(iface_.mem_free(*memory).ok());
}

// A driver without the mapping attributes: segments come from cuMemGetAddressRange, in a
// context hmr makes current.  That call refused fails the query naming it (and the context
// calls before it likewise), leaves no context current, and the next query works.
TEST_F(CudaDriverFailures, SegmentLookupFailuresNameTheCall) {
  init();
  fake_cuda().set_failure("cuPointerGetAttributes:mapping", kInvalidValue);
  const unsigned long long device = alloc(1, 1 << 20);
  struct Failing {
    const char* entry_point;
    int code;
    const char* named;
  };
  for (const Failing f : {Failing{"cuMemGetAddressRange_v2", kInvalidContext, "cuMemGetAddressRange"},
                          Failing{"cuCtxGetCurrent", kDeinitialized, "cuCtxGetCurrent"},
                          Failing{"cuCtxSetCurrent", kInvalidContext, "cuCtxSetCurrent"}}) {
    SCOPED_TRACE(f.entry_point);
    fake_cuda().set_failure(f.entry_point, f.code);
    Result<PointerInfo> failed = iface_.query(as_pointer(device + 8), 64);
    fake_cuda().set_failure(f.entry_point, 0);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), HMR_EIO);
    EXPECT_TRUE(names(failed.status(), f.named)) << failed.status().reason();
    EXPECT_EQ(fake_cuda().current_context_device(), -1);
    Result<PointerInfo> answered = iface_.query(as_pointer(device + 8), 64);
    ASSERT_TRUE(answered.ok()) << answered.status().reason();
    EXPECT_EQ(answered->base, device);
  }
  fake_cuda().set_failure("cuPointerGetAttributes:mapping", 0);
}

}  // namespace
}  // namespace hmr::cuda
