// Every Level Zero call the iface makes, made to fail (tests/fakes/fake_ze.c: fake_ze_set_failure
// and fake_ze_set_failure_once): each failure is an error code with a reason naming the call,
// never a crash, a leak or a lost allocation; what init could not learn is asked again later;
// and the same call works once the driver does.  Calls on paths threads share (queries,
// allocation, frees, copies) fail on four threads at once.  zeInit, zeDeviceGetProperties at
// init, zeMemAllocDevice, zeCommandListCreateImmediate and the dma-buf export's refusals on
// one thread are in ze_iface_test.cpp.
//
// Results as the Level Zero specification lists them for these calls (ze_api.h): any call may
// answer ZE_RESULT_ERROR_DEVICE_LOST and ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY; allocations
// ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY; zeContextDestroy ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
// while a command list of the context lives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/hmem/call_failures.h"
#include "tests/hmem/ze_fake_library.h"
#include "tests/hmem/ze_iface_fixture.h"
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
constexpr int kOutOfDeviceMemory = 0x70000003;
constexpr size_t kSize = 64 << 10;

constexpr DeviceId kDriver0Device0{0x0};  // two tiles
constexpr DeviceId kDriver1Device0{0x10000};

const std::vector<std::string> kNoFailures(kCallFailureThreads);

class ZeCallFailures : public hmr::testing::ZeIfaceFixture {
 protected:
  void TearDown() override {
    close_iface();
    EXPECT_EQ(fake().live_contexts(), 0);
    EXPECT_EQ(fake().live_command_lists(), 0);
    ZeIfaceFixture::TearDown();
  }

  // Init refused by the `nth` call of `call` from now: the reason names it, and nothing the
  // failed init made is left.
  void expect_init_refused(const char* call, int nth, const char* also_named = nullptr) {
    SCOPED_TRACE(std::string(call) + " #" + std::to_string(nth));
    fake().set_failure_once(call, kDeviceLost, nth);
    const Status refused = iface_->init();
    fake().set_failure(call, 0);
    EXPECT_EQ(unless_failed_naming(refused, HMR_EIO, call), "");
    if (also_named != nullptr) {
      EXPECT_NE(refused.reason().find(also_named), std::string::npos) << refused.reason();
    }
    EXPECT_EQ(fake().live_contexts(), 0);
    EXPECT_EQ(iface_->device_count().status().code(), HMR_EINVAL);  // not initialised
  }
};

// ---- init ------------------------------------------------------------------------------------

// Discovery's calls that init needs: each refusal fails init naming it (and the driver for
// per-driver calls), destroys the contexts made before it, and a later init works.
TEST_F(ZeCallFailures, EachDiscoveryCallRefusedFailsInitAndLeavesNoContext) {
  expect_init_refused("zeDriverGet", 1);  // the count
  expect_init_refused("zeDriverGet", 2);  // the handles
  expect_init_refused("zeContextCreate", 2, "driver 1");
  expect_init_refused("zeDeviceGet", 1);
  expect_init_refused("zeDeviceGet", 4, "driver 1");  // driver 1's handles
  init();
  EXPECT_EQ(*iface_->device_count(), FAKE_ZE_DEVICE_COUNT);
}

// What init only reports: the API version (empty) and a device's PCI location (that device has
// no sys_dev); init succeeds without them.
TEST_F(ZeCallFailures, OptionalInitQuestionsRefusedOnlyNarrowWhatIsReported) {
  fake().set_failure("zeDriverGetApiVersion", kDeviceLost);
  fake().set_failure_once("zeDevicePciGetPropertiesExt", kDeviceLost, 1);  // device 0.0
  init();
  fake().set_failure("zeDriverGetApiVersion", 0);
  EXPECT_EQ(iface_->runtime_version(), "");
  Result<std::vector<ZeDeviceInfo>> devices = iface_->devices();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ((*devices)[0].pci_bus_id, "");
  EXPECT_EQ((*devices)[1].pci_bus_id, "0000:4a:00.0");
}

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
  // Answered now, so kept: memory on the other tile is found without listing them again
  // (before, every lookup of tile memory listed the tiles of every such device anew).
  void* on_other_tile = nullptr;
  ASSERT_EQ(fake().alloc_on_tile(0, kSize, &on_other_tile), 0);
  allocations_.push_back(on_other_tile);
  const int listings = fake().call_count("zeDeviceGetSubDevices");
  for (void* ptr : {on_tile, on_other_tile, on_tile}) {
    Result<PointerInfo> again = iface_->query(ptr, 1);
    ASSERT_TRUE(again.ok()) << again.status().reason();
    EXPECT_EQ(again->device, kDriver0Device0);
  }
  EXPECT_EQ(fake().call_count("zeDeviceGetSubDevices"), listings);
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

// ---- shutdown --------------------------------------------------------------------------------

// zeContextDestroy refused at shutdown: logged with its name, never a crash.
TEST_F(ZeCallFailures, ARefusedContextDestroyIsLogged) {
  init();
  fake().set_failure_once("zeContextDestroy", kDeviceLost, 1);
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("zeContextDestroy"), std::string::npos) << log;
  EXPECT_EQ(fake().live_contexts(), 1);  // the driver keeps it
  fake().reset();                        // (forgets it)
}

// ---- calls threads share ---------------------------------------------------------------------

// zeMemGetAllocProperties refused on every thread: device and host memory alike fail closed
// (never "not Level Zero memory, so host memory"), the hit path's identify too.
TEST_F(ZeCallFailures, RefusedPointerQueriesFailClosedOnEveryThread) {
  init();
  void* device = alloc(1, 0, kSize);
  std::vector<char> host(64);
  fake().set_failure("zeMemGetAllocProperties", kDeviceLost);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    if (i == 3) {
      hmem::AllocationIdentity identity{};
      return unless_failed_naming(iface_->identify(device, 1, identity), HMR_EIO,
                                  "zeMemGetAllocProperties");
    }
    const void* ptr = i % 2 == 0 ? device : static_cast<const void*>(host.data());
    return unless_failed_naming(iface_->query(ptr, 1).status(), HMR_EIO,
                                "zeMemGetAllocProperties");
  });
  fake().set_failure("zeMemGetAllocProperties", 0);
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_TRUE(iface_->query(device, 1).ok());
  EXPECT_EQ(iface_->query(host.data(), 1).status().code(), HMR_ENOENT);
}

// zeMemGetAddressRange refused on every thread: queries and frees name it, and a refused free
// frees nothing (the memory is still there, and frees next time).
TEST_F(ZeCallFailures, RefusedAddressRangesFailQueriesAndFreesOnEveryThread) {
  init();
  std::vector<void*> made(kCallFailureThreads);
  for (void*& ptr : made) {
    Result<void*> allocated = iface_->mem_alloc(kDriver1Device0, kSize, MemoryKind::device_only);
    ASSERT_TRUE(allocated.ok()) << allocated.status().reason();
    ptr = *allocated;
  }
  fake().set_failure("zeMemGetAddressRange", kDeviceLost);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    void* ptr = made[static_cast<size_t>(i)];
    std::string why =
        unless_failed_naming(iface_->query(ptr, 1).status(), HMR_EIO, "zeMemGetAddressRange");
    if (why.empty()) why = unless_failed_naming(iface_->mem_free(ptr), HMR_EIO, "zeMemGetAddressRange");
    return why;
  });
  fake().set_failure("zeMemGetAddressRange", 0);
  EXPECT_EQ(failures, kNoFailures);
  for (void* ptr : made) {
    EXPECT_TRUE(iface_->query(ptr, 1).ok());
    EXPECT_TRUE(iface_->mem_free(ptr).ok());
  }
}

// zeMemAllocDevice, zeMemAllocHost and zeMemAllocShared refused on every thread: each names its
// call, nothing is allocated; zeMemFree refused: the memory is still there, and frees next time.
TEST_F(ZeCallFailures, RefusedAllocationsAndFreesOnEveryThreadLoseNothing) {
  init();
  const MemoryKind kinds[] = {MemoryKind::device_only, MemoryKind::host_alloc,
                              MemoryKind::managed, MemoryKind::device_only};
  const char* calls[] = {"zeMemAllocDevice", "zeMemAllocHost", "zeMemAllocShared",
                         "zeMemAllocDevice"};
  for (const char* call : calls) fake().set_failure(call, kOutOfDeviceMemory);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    return unless_failed_naming(
        iface_->mem_alloc(kDriver0Device0, kSize, kinds[i]).status(), HMR_ENOMEM, calls[i]);
  });
  for (const char* call : calls) fake().set_failure(call, 0);
  EXPECT_EQ(failures, kNoFailures);

  std::vector<void*> made(kCallFailureThreads);
  for (int i = 0; i < kCallFailureThreads; ++i) {
    Result<void*> allocated = iface_->mem_alloc(kDriver0Device0, kSize, kinds[i]);
    ASSERT_TRUE(allocated.ok()) << allocated.status().reason();
    made[static_cast<size_t>(i)] = *allocated;
  }
  fake().set_failure("zeMemFree", kDeviceLost);
  failures = on_threads([&](int i) -> std::string {
    void* ptr = made[static_cast<size_t>(i)];
    std::string why = unless_failed_naming(iface_->mem_free(ptr), HMR_EIO, "zeMemFree");
    if (why.empty() && !iface_->query(ptr, 1).ok()) why = "a refused free lost the allocation";
    return why;
  });
  fake().set_failure("zeMemFree", 0);
  EXPECT_EQ(failures, kNoFailures);
  for (void* ptr : made) EXPECT_TRUE(iface_->mem_free(ptr).ok());
}

// The copy engine's calls refused on every thread (zeCommandListCreateImmediate,
// zeCommandListAppendMemoryCopy, zeCommandListHostSynchronize): each copy names its call and
// leaves its list destroyed, no byte of a refused append moves, and copies work afterwards.
TEST_F(ZeCallFailures, RefusedCopiesOnEveryThreadNameTheirCallAndLeaveNoList) {
  init();
  std::vector<void*> device(kCallFailureThreads);
  for (void*& ptr : device) ptr = alloc(0, 0, kSize);
  const std::vector<unsigned char> zeros(4096, 0);
  for (void* ptr : device) ASSERT_TRUE(iface_->copy_to_device(ptr, zeros.data(), 4096).ok());
  const int idle = fake().live_command_lists();  // one: the copies above ran one at a time

  for (const char* call : {"zeCommandListCreateImmediate", "zeCommandListAppendMemoryCopy",
                           "zeCommandListHostSynchronize"}) {
    SCOPED_TRACE(call);
    for (void* ptr : device) ASSERT_TRUE(iface_->copy_to_device(ptr, zeros.data(), 4096).ok());
    fake().set_failure(call, kDeviceLost);
    std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      const std::vector<unsigned char> bytes(4096, static_cast<unsigned char>(0x60 + i));
      return unless_failed_naming(
          iface_->copy_to_device(device[static_cast<size_t>(i)], bytes.data(), 4096), HMR_EIO,
          call);
    });
    fake().set_failure(call, 0);
    if (std::string(call) == "zeCommandListCreateImmediate") {
      // Threads that found an idle list copied; only those that had to create one failed.
      for (std::string& failure : failures) {
        if (failure.find("succeeded") != std::string::npos) failure.clear();
      }
    }
    EXPECT_EQ(failures, kNoFailures);
    EXPECT_LE(fake().live_command_lists(), std::max(idle, kCallFailureThreads));
    if (std::string(call) == "zeCommandListAppendMemoryCopy") {
      for (void* ptr : device) {
        std::vector<unsigned char> seen(4096, 0xff);
        ASSERT_EQ(fake().read(ptr, seen.data(), seen.size()), 0);
        EXPECT_EQ(seen, zeros);  // no byte of a refused append moved
      }
    }
  }
  for (void* ptr : device) {
    std::vector<unsigned char> back(4096, 0xff);
    ASSERT_TRUE(iface_->copy_from_device(back.data(), ptr, 4096).ok());
  }
}

// zeCommandListDestroy refused for a list whose copy failed: the list is kept (before the fix
// it was dropped, and with it hmr's context, which the driver will not destroy while a list of
// it lives) and destroyed when the iface is.
TEST_F(ZeCallFailures, AListTheDriverWillNotDestroyIsDestroyedAtShutdown) {
  init();
  void* ptr = alloc(0, 0, kSize);
  const std::vector<unsigned char> bytes(4096, 0x42);
  fake().set_failure("zeCommandListAppendMemoryCopy", kDeviceLost);
  fake().set_failure("zeCommandListDestroy", kDeviceLost);
  EXPECT_FALSE(iface_->copy_to_device(ptr, bytes.data(), bytes.size()).ok());
  fake().set_failure("zeCommandListAppendMemoryCopy", 0);
  fake().set_failure("zeCommandListDestroy", 0);
  EXPECT_EQ(fake().live_command_lists(), 1);
  ASSERT_TRUE(iface_->copy_to_device(ptr, bytes.data(), bytes.size()).ok());  // a new list
  iface_.reset();
  EXPECT_EQ(fake().live_command_lists(), 0);
  EXPECT_EQ(fake().live_contexts(), 0);
}

}  // namespace
}  // namespace hmr::ze
