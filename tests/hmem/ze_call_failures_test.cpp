// Level Zero calls the iface makes, made to fail (tests/fakes/fake_ze.c: fake_ze_set_failure
// and fake_ze_set_failure_once): each failure is an error code with a reason naming the call,
// never a crash, a leak or a lost allocation, and what init could not learn is asked again
// later.
//
// Results as the Level Zero specification lists them for these calls (ze_api.h): any call may
// answer ZE_RESULT_ERROR_DEVICE_LOST and ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY; allocations
// ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY; zeContextDestroy ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
// while a command list of the context lives.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/hmem/call_failures.h"
#include "tests/hmem/ze_fake_library.h"
#include "ze/ze_iface.h"

namespace hmr::ze {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::FakeZe;
using hmr::testing::fake_ze;
using hmr::testing::kCallFailureThreads;
using hmr::testing::on_threads;
using hmr::testing::unless_failed_naming;

constexpr int kDeviceLost = 0x70000001;
constexpr int kOutOfHostMemory = 0x70000002;
constexpr size_t kSize = 64 << 10;

constexpr DeviceId kDriver0Device0{0x0};  // two tiles

const std::vector<std::string> kNoFailures(kCallFailureThreads);

class ZeCallFailures : public ::testing::Test {
 protected:
  const FakeZe& fake() const { return fake_ze(); }

  void SetUp() override {
    setenv("HMR_ZE_LIBRARY", fake().path, 1);
    fake().reset();
    iface_ = std::make_unique<ZeIface>();
  }
  void TearDown() override {
    for (void* ptr : allocations_) fake().free(ptr);
    iface_.reset();
    EXPECT_EQ(fake().live_contexts(), 0);
    EXPECT_EQ(fake().live_command_lists(), 0);
    fake().reset();
    unsetenv("HMR_ZE_LIBRARY");
  }

  void init() {
    const Status started = iface_->init();
    ASSERT_TRUE(started.ok()) << started.reason();
  }
  // Allocated as the application would, in a context of its own.
  void* alloc(int driver, int device, size_t size, int memory = FAKE_ZE_MEM_DEVICE) {
    void* ptr = nullptr;
    EXPECT_EQ(fake().alloc(driver, device, size, memory, &ptr), 0);
    allocations_.push_back(ptr);
    return ptr;
  }
  std::unique_ptr<ZeIface> iface_;
  std::vector<void*> allocations_;
};

// ---- init ------------------------------------------------------------------------------------

// zeDeviceGetExternalMemoryProperties refused at init: the device's dma-buf answer says why,
// and is asked again at the next question (before the fix the refusal meant "no dma-buf" for
// the life of the process); once answered, exports work.
TEST_F(ZeCallFailures, ADmabufQuestionRefusedAtInitIsAskedAgain) {
  fake().set_failure("zeDeviceGetExternalMemoryProperties", kDeviceLost);
  init();
  void* base = alloc(0, 0, kSize);
  Result<hmem::DeviceCapabilities> refused = iface_->capabilities(kDriver0Device0);
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->dmabuf.supported);
  EXPECT_NE(refused->dmabuf.reason.find("zeDeviceGetExternalMemoryProperties"), std::string::npos)
      << refused->dmabuf.reason;
  EXPECT_EQ(unless_failed_naming(iface_->export_dmabuf({base, kSize}).status(), HMR_EOPNOTSUPP,
                                 "zeDeviceGetExternalMemoryProperties"),
            "");
  fake().set_failure("zeDeviceGetExternalMemoryProperties", 0);
  Result<hmem::DeviceCapabilities> answered = iface_->capabilities(kDriver0Device0);
  ASSERT_TRUE(answered.ok());
  EXPECT_TRUE(answered->dmabuf.supported) << answered->dmabuf.reason;
  Result<DmabufExport> exported = iface_->export_dmabuf({base, kSize});
  EXPECT_TRUE(exported.ok()) << exported.status().reason();
  // Known now: not asked again.
  const int asked = fake().call_count("zeDeviceGetExternalMemoryProperties");
  EXPECT_TRUE(iface_->capabilities(kDriver0Device0)->dmabuf.supported);
  EXPECT_EQ(fake().call_count("zeDeviceGetExternalMemoryProperties"), asked);
}

// zeDeviceGetSubDevices refused at init: memory on a tile reports a device handle init never
// saw.  Before the fix that memory was "of a device ze driver 0 did not list at init"
// (HMR_EIO, no call named) for the life of the process; now the tiles are asked for again:
// a refusal names zeDeviceGetSubDevices, an answer finds the device.
TEST_F(ZeCallFailures, TilesInitCouldNotListAreAskedForAgain) {
  fake().set_failure("zeDeviceGetSubDevices", kDeviceLost);
  init();
  void* on_tile = nullptr;
  ASSERT_EQ(fake().alloc_on_tile(1, kSize, &on_tile), 0);
  allocations_.push_back(on_tile);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    if (i % 2 == 0) {
      return unless_failed_naming(iface_->query(on_tile, 1).status(), HMR_EIO,
                                  "zeDeviceGetSubDevices");
    }
    hmem::AllocationIdentity identity{};
    return unless_failed_naming(iface_->identify(on_tile, 1, identity), HMR_EIO,
                                "zeDeviceGetSubDevices");
  });
  EXPECT_EQ(failures, kNoFailures);
  fake().set_failure("zeDeviceGetSubDevices", 0);
  Result<PointerInfo> info = iface_->query(on_tile, 1);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->device, kDriver0Device0);
  EXPECT_EQ(info->kind, MemoryKind::device_only);
}

// zeDeviceGetProperties refused while the device of such memory is looked up: the query
// names it (before the fix: "did not list at init").
TEST_F(ZeCallFailures, ARefusedDevicePropertiesQueryNamesTheCall) {
  fake().set_failure("zeDeviceGetSubDevices", kDeviceLost);
  init();
  fake().set_failure("zeDeviceGetSubDevices", 0);
  void* on_tile = nullptr;
  ASSERT_EQ(fake().alloc_on_tile(0, kSize, &on_tile), 0);
  allocations_.push_back(on_tile);
  fake().set_failure("zeDeviceGetProperties", kOutOfHostMemory);
  EXPECT_EQ(unless_failed_naming(iface_->query(on_tile, 1).status(), HMR_ENOMEM,
                                 "zeDeviceGetProperties"),
            "");
  fake().set_failure("zeDeviceGetProperties", 0);
  EXPECT_TRUE(iface_->query(on_tile, 1).ok());
}

}  // namespace
}  // namespace hmr::ze
