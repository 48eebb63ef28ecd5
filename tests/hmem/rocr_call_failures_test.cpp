// ROCr runtime calls the iface makes, made to fail (tests/fakes/fake_hsa.c,
// fake_hsa_set_failure and fake_hsa_set_failure_once): each failure is an error code with a
// reason naming the call, never a crash, a leak or a lost allocation, and what init could not
// learn is asked again later.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rocr/rocr_iface.h"
#include "tests/hmem/call_failures.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_temp_file.h"

namespace hmr::rocr {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::FakeHsa;
using hmr::testing::fake_hsa;
using hmr::testing::kCallFailureThreads;
using hmr::testing::on_threads;
using hmr::testing::TempFile;
using hmr::testing::unless_failed_naming;

constexpr int kError = 0x1000;            // HSA_STATUS_ERROR
constexpr int kOutOfResources = 0x1008;   // HSA_STATUS_ERROR_OUT_OF_RESOURCES
constexpr size_t kPage = 4096;

const std::vector<std::string> kNoFailures(kCallFailureThreads);

struct FreeCounter {
  std::atomic<int> frees{0};
  static void record(void* context, uint64_t, size_t) {
    static_cast<FreeCounter*>(context)->frees.fetch_add(1);
  }
};

class RocrCallFailures : public ::testing::Test {
 protected:
  const FakeHsa& fake() const { return fake_hsa(); }

  void SetUp() override {
    setenv("HMR_ROCR_LIBRARY", fake().path, 1);
    fake().reset();
    iface_ = std::make_unique<RocrIface>(KernelConfigSources{config_.path(), "/nonexistent"});
  }
  void TearDown() override {
    for (void* ptr : allocations_) fake().free(ptr);
    iface_.reset();
    fake().reset();
    unsetenv("HMR_ROCR_LIBRARY");
  }

  void init() {
    const Status started = iface_->init();
    ASSERT_TRUE(started.ok()) << started.reason();
  }
  // Memory of GPU `gpu` (-1: the CPU's system pool) as the application allocates it.
  void* alloc(int gpu, size_t size) {
    void* ptr = nullptr;
    EXPECT_EQ(fake().alloc(gpu, size, &ptr), 0);
    allocations_.push_back(ptr);
    return ptr;
  }
  void free_allocation(void* ptr) {
    EXPECT_EQ(fake().free(ptr), 0);
    std::erase(allocations_, ptr);
  }

  TempFile config_{"call-failures-config",
                   "CONFIG_PCI=y\nCONFIG_DMABUF_MOVE_NOTIFY=y\nCONFIG_PCI_P2PDMA=y\n"};
  std::unique_ptr<RocrIface> iface_;
  std::vector<void*> allocations_;
};

// ---- shutdown --------------------------------------------------------------------------------

// hsa_amd_deregister_deallocation_callback refused at shutdown: the runtime keeps a callback
// whose user_data is hmr's free-watch table, and runs it when the memory is freed.  The table
// must outlive the iface then (before the fix it was freed with it: under ASan the free below
// is a heap-use-after-free inside the trampoline), delivering to nobody, and the refusal is
// logged with the call's name.
TEST_F(RocrCallFailures, ARefusedDeregistrationKeepsTheTableTheRuntimeStillCalls) {
  init();
  void* base = alloc(0, kPage);
  Result<PointerInfo> info = iface_->query(base, 1);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  FreeCounter counter;
  ASSERT_TRUE(iface_->watch_free(*info, &FreeCounter::record, &counter).ok());
  ASSERT_EQ(fake().notifier_count(), 1);

  fake().set_failure("hsa_amd_deregister_deallocation_callback", kError);
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  fake().set_failure("hsa_amd_deregister_deallocation_callback", 0);
  EXPECT_NE(log.find("hsa_amd_deregister_deallocation_callback"), std::string::npos) << log;
  EXPECT_NE(log.find("HSA_STATUS_ERROR"), std::string::npos) << log;
  EXPECT_EQ(fake().notifier_count(), 1);  // the runtime still holds it
  EXPECT_EQ(fake().init_count(), 0);      // and hsa_shut_down still balanced hsa_init

  free_allocation(base);  // runs the trampoline on the table the runtime was given
  EXPECT_EQ(fake().notifier_count(), 0);
  EXPECT_EQ(counter.frees.load(), 0);  // its watchers went with the iface
}

// The same with the runtime answering that it had no such callback (a free on another thread
// took it and may be running it): the table is kept too, and a new iface works as usual.
TEST_F(RocrCallFailures, ADeregistrationAnsweredInvalidArgumentKeepsTheTableToo) {
  init();
  void* first = alloc(0, kPage);
  void* second = alloc(1, kPage);
  FreeCounter counter;
  for (void* base : {first, second}) {
    Result<PointerInfo> info = iface_->query(base, 1);
    ASSERT_TRUE(info.ok());
    ASSERT_TRUE(iface_->watch_free(*info, &FreeCounter::record, &counter).ok());
  }
  // Only the second deregistration is refused: one refusal is enough to keep the table.
  fake().set_failure_once("hsa_amd_deregister_deallocation_callback", 0x1001, 2);
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused 1 of"), std::string::npos) << log;
  EXPECT_EQ(fake().notifier_count(), 1);
  free_allocation(first);
  free_allocation(second);
  EXPECT_EQ(fake().notifier_count(), 0);
  EXPECT_EQ(counter.frees.load(), 0);

  iface_ = std::make_unique<RocrIface>(KernelConfigSources{config_.path(), "/nonexistent"});
  init();
  void* again = alloc(0, kPage);
  Result<PointerInfo> info = iface_->query(again, 1);
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(iface_->watch_free(*info, &FreeCounter::record, &counter).ok());
  free_allocation(again);
  EXPECT_EQ(counter.frees.load(), 1);
}

// hsa_shut_down refused: logged with its name, never a crash; the runtime keeps the reference.
TEST_F(RocrCallFailures, ARefusedShutDownIsLogged) {
  init();
  fake().set_failure("hsa_shut_down", kError);
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  fake().set_failure("hsa_shut_down", 0);
  EXPECT_NE(log.find("hsa_shut_down"), std::string::npos) << log;
  EXPECT_EQ(fake().init_count(), 1);
}

// ---- discovery at init -------------------------------------------------------------------------

// hsa_amd_agent_iterate_memory_pools refused at init: init still succeeds (only mem_alloc
// needs a pool), every allocation names the call (before the fix: "has no coarse-grained
// global memory pool", HMR_EOPNOTSUPP, the call unnamed), and once the runtime answers the
// next allocation finds the pool: a refusal is not cached for good (before the fix it was).
TEST_F(RocrCallFailures, APoolWalkRefusedAtInitIsAskedAgainAndNamed) {
  fake().set_failure("hsa_amd_agent_iterate_memory_pools", kError);
  init();
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    const MemoryKind kind = i < 2 ? MemoryKind::device_only : MemoryKind::managed;
    Result<void*> ptr = iface_->mem_alloc(DeviceId{static_cast<uint64_t>(i % 2)}, kPage, kind);
    return unless_failed_naming(ptr.status(), HMR_EIO, "hsa_amd_agent_iterate_memory_pools");
  });
  EXPECT_EQ(failures, kNoFailures);

  fake().set_failure("hsa_amd_agent_iterate_memory_pools", 0);
  std::vector<void*> made(kCallFailureThreads);
  failures = on_threads([&](int i) -> std::string {
    const MemoryKind kind = i < 2 ? MemoryKind::device_only : MemoryKind::managed;
    Result<void*> ptr = iface_->mem_alloc(DeviceId{static_cast<uint64_t>(i % 2)}, kPage, kind);
    if (!ptr.ok()) return ptr.status().reason();
    made[static_cast<size_t>(i)] = *ptr;
    return {};
  });
  EXPECT_EQ(failures, kNoFailures);
  // Found now, so not walked again.
  const int walks = fake().call_count("hsa_amd_agent_iterate_memory_pools");
  Result<void*> more = iface_->mem_alloc(DeviceId{1}, kPage, MemoryKind::device_only);
  ASSERT_TRUE(more.ok()) << more.status().reason();
  made.push_back(*more);
  EXPECT_EQ(fake().call_count("hsa_amd_agent_iterate_memory_pools"), walks);
  for (void* ptr : made) {
    if (ptr != nullptr) {
      const Status freed = iface_->mem_free(ptr);
      EXPECT_TRUE(freed.ok()) << freed.reason();
    }
  }
}

// One walk refused (GPU 1's, the second of init's three): GPU 0 and the system pool are found
// at init; GPU 1's pool is found by its first allocation.
TEST_F(RocrCallFailures, OneRefusedPoolWalkAffectsOnlyItsAgent) {
  fake().set_failure_once("hsa_amd_agent_iterate_memory_pools", kOutOfResources, 2);
  init();
  const int walks = fake().call_count("hsa_amd_agent_iterate_memory_pools");
  Result<void*> on_zero = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::device_only);
  Result<void*> managed = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::managed);
  ASSERT_TRUE(on_zero.ok()) << on_zero.status().reason();
  ASSERT_TRUE(managed.ok()) << managed.status().reason();
  EXPECT_EQ(fake().call_count("hsa_amd_agent_iterate_memory_pools"), walks);
  Result<void*> on_one = iface_->mem_alloc(DeviceId{1}, kPage, MemoryKind::device_only);
  ASSERT_TRUE(on_one.ok()) << on_one.status().reason();
  EXPECT_EQ(fake().call_count("hsa_amd_agent_iterate_memory_pools"), walks + 1);
  for (void* ptr : {*on_zero, *managed, *on_one}) EXPECT_TRUE(iface_->mem_free(ptr).ok());
}

// hsa_amd_memory_pool_get_info refused: the pool that would have been chosen cannot be told
// from the others, so the allocation names that call instead of saying there is no pool.
TEST_F(RocrCallFailures, APoolTheRuntimeWillNotDescribeIsNamedNotMissing) {
  fake().set_failure("hsa_amd_memory_pool_get_info", kError);
  init();
  Result<void*> refused = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::device_only);
  EXPECT_EQ(unless_failed_naming(refused.status(), HMR_EIO, "hsa_amd_memory_pool_get_info"), "");
  EXPECT_NE(refused.status().reason().find("SEGMENT"), std::string::npos)
      << refused.status().reason();
  fake().set_failure("hsa_amd_memory_pool_get_info", 0);
  Result<void*> allocated = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::device_only);
  ASSERT_TRUE(allocated.ok()) << allocated.status().reason();
  EXPECT_TRUE(iface_->mem_free(*allocated).ok());
}

// hsa_agent_get_info: the device type of an agent is needed (init fails naming the call, and
// balances hsa_init); a GPU's PCI location is not (that GPU only has no sys_dev).
TEST_F(RocrCallFailures, AgentInfoTheIfaceNeedsFailsInitTheRestOnlyNarrowsIt) {
  // Calls at init: the CPU's DEVICE, GPU 0's DEVICE, NAME, BDFID, DOMAIN, then GPU 1's.
  fake().set_failure_once("hsa_agent_get_info", kError, 2);
  const Status refused = iface_->init();
  EXPECT_EQ(unless_failed_naming(refused, HMR_EIO, "hsa_agent_get_info"), "");
  EXPECT_NE(refused.reason().find("DEVICE"), std::string::npos) << refused.reason();
  EXPECT_EQ(fake().init_count(), 0);

  fake().set_failure_once("hsa_agent_get_info", kError, 4);  // GPU 0's BDFID
  init();
  Result<hmem::DeviceCapabilities> zero = iface_->capabilities(DeviceId{0});
  Result<hmem::DeviceCapabilities> one = iface_->capabilities(DeviceId{1});
  ASSERT_TRUE(zero.ok() && one.ok());
  EXPECT_EQ(zero->sys_dev, "");
  EXPECT_EQ(one->sys_dev, "0001:c3:01.0");
  void* base = alloc(0, kPage);
  Result<PointerInfo> info = iface_->query(base, 1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->sys_dev, "");
}

// hsa_system_get_info: the version is only reported (an unreadable one is empty); the
// runtime's dma-buf answer, if refused, is asked again at the next question (before the fix a
// refusal at init meant "no dma-buf" for the life of the process).
TEST_F(RocrCallFailures, SystemInfoRefusalsNarrowNothingForGood) {
  fake().set_failure_once("hsa_system_get_info", kError, 1);  // VERSION_MAJOR
  init();
  EXPECT_EQ(iface_->runtime_version(), "");
  iface_ = std::make_unique<RocrIface>(KernelConfigSources{config_.path(), "/nonexistent"});

  // VERSION_MAJOR, VERSION_MINOR, BUILD_VERSION, then DMABUF_SUPPORTED.
  fake().set_failure_once("hsa_system_get_info", kOutOfResources, 4);
  init();
  EXPECT_EQ(iface_->runtime_version(), "HSA 1.1, ROCr build fake-rocr-5.7");
  void* base = alloc(0, kPage);
  fake().set_failure("hsa_system_get_info", kOutOfResources);
  Result<hmem::DeviceCapabilities> refused = iface_->capabilities(DeviceId{0});
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->dmabuf.supported);
  EXPECT_NE(refused->dmabuf.reason.find("hsa_system_get_info"), std::string::npos)
      << refused->dmabuf.reason;
  Result<DmabufExport> not_exported = iface_->export_dmabuf({base, kPage});
  EXPECT_EQ(unless_failed_naming(not_exported.status(), HMR_EOPNOTSUPP, "hsa_system_get_info"),
            "");
  fake().set_failure("hsa_system_get_info", 0);
  Result<hmem::DeviceCapabilities> answered = iface_->capabilities(DeviceId{0});
  ASSERT_TRUE(answered.ok());
  EXPECT_TRUE(answered->dmabuf.supported) << answered->dmabuf.reason;
  Result<DmabufExport> exported = iface_->export_dmabuf({base, kPage});
  EXPECT_TRUE(exported.ok()) << exported.status().reason();
}

}  // namespace
}  // namespace hmr::rocr
