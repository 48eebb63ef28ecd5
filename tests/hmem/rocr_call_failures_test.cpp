// Every ROCr runtime call the iface makes, made to fail (tests/fakes/fake_hsa.c,
// fake_hsa_set_failure and fake_hsa_set_failure_once): each failure is an error code with a
// reason naming the call, never a crash, a leak or a lost allocation, and the same call works
// once the runtime does.  Calls on paths threads share (queries, copies, allocation, pinning,
// free watches, exports) fail on four threads at once.  hsa_init, hsa_iterate_agents and
// single-thread refusals of several calls are in rocr_iface_test.cpp.
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
#include "tests/hmem/fd_checks.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_iface_fixture.h"
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
using hmr::testing::open_fd_count;
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

class RocrCallFailures : public hmr::testing::RocrIfaceFixture {};

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

  iface_ = new_iface();
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
  iface_ = new_iface();

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

// hsa_status_string refused: the reason still names the call and the status, without text.
TEST_F(RocrCallFailures, AStatusWithoutTextStillNamesTheCallAndStatus) {
  init();
  void* base = alloc(0, kPage);
  fake().set_failure("hsa_status_string", kError);
  fake().set_failure("hsa_memory_copy", kOutOfResources);
  char host[16] = {};
  const Status failed = iface_->copy_to_device(base, host, sizeof host);
  EXPECT_EQ(unless_failed_naming(failed, HMR_ENOMEM, "hsa_memory_copy"), "");
  EXPECT_NE(failed.reason().find("HSA_STATUS_ERROR_OUT_OF_RESOURCES"), std::string::npos)
      << failed.reason();
  EXPECT_NE(failed.reason().find("no description from the runtime"), std::string::npos)
      << failed.reason();
}

// ---- calls threads share ---------------------------------------------------------------------

// hsa_amd_pointer_info refused on every thread: device and host memory alike fail closed with
// the call named (never "not ROCr memory, so host memory"), and exports behind a query too.
TEST_F(RocrCallFailures, RefusedPointerQueriesFailClosedOnEveryThread) {
  init();
  void* device = alloc(1, kPage);
  std::vector<char> host(64);
  fake().set_failure("hsa_amd_pointer_info", kError);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    if (i == 3) {
      return unless_failed_naming(iface_->export_dmabuf({device, kPage}).status(), HMR_EIO,
                                  "hsa_amd_pointer_info");
    }
    const void* ptr = i % 2 == 0 ? device : static_cast<const void*>(host.data());
    return unless_failed_naming(iface_->query(ptr, 1).status(), HMR_EIO, "hsa_amd_pointer_info");
  });
  EXPECT_EQ(failures, kNoFailures);
  fake().set_failure("hsa_amd_pointer_info", 0);
  EXPECT_TRUE(iface_->query(device, 1).ok());
  EXPECT_EQ(iface_->query(host.data(), 1).status().code(), HMR_ENOENT);
}

// hsa_memory_copy refused on every thread: each names the call and moves no byte; then only
// the second call from now fails, and exactly one thread sees it.
TEST_F(RocrCallFailures, RefusedCopiesMoveNothingOnEveryThread) {
  init();
  std::vector<void*> device(kCallFailureThreads);
  for (void*& ptr : device) ptr = alloc(0, kPage);
  const std::vector<unsigned char> zeros(kPage, 0);
  for (void* ptr : device) ASSERT_TRUE(iface_->copy_to_device(ptr, zeros.data(), kPage).ok());

  fake().set_failure("hsa_memory_copy", kOutOfResources);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    std::vector<unsigned char> bytes(kPage, static_cast<unsigned char>(0x30 + i));
    void* ptr = device[static_cast<size_t>(i)];
    std::string why = unless_failed_naming(iface_->copy_to_device(ptr, bytes.data(), kPage),
                                           HMR_ENOMEM, "hsa_memory_copy");
    if (why.empty()) {
      why = unless_failed_naming(iface_->copy_from_device(bytes.data(), ptr, kPage), HMR_ENOMEM,
                                 "hsa_memory_copy");
    }
    if (why.empty() &&
        bytes != std::vector<unsigned char>(kPage, static_cast<unsigned char>(0x30 + i))) {
      why = "a refused copy from the device wrote the host buffer";
    }
    return why;
  });
  EXPECT_EQ(failures, kNoFailures);
  for (void* ptr : device) {
    std::vector<unsigned char> seen(kPage, 0xff);
    ASSERT_EQ(fake().read(ptr, seen.data(), kPage), 0);
    EXPECT_EQ(seen, zeros);  // no byte moved
  }

  fake().set_failure("hsa_memory_copy", 0);
  fake().set_failure_once("hsa_memory_copy", kOutOfResources, 2);
  std::atomic<int> refused{0};
  failures = on_threads([&](int i) -> std::string {
    const std::vector<unsigned char> bytes(kPage, 0x77);
    const Status copied = iface_->copy_to_device(device[static_cast<size_t>(i)], bytes.data(),
                                                 kPage);
    if (copied.ok()) return {};
    refused.fetch_add(1);
    return unless_failed_naming(copied, HMR_ENOMEM, "hsa_memory_copy");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(refused.load(), 1);
}

// hsa_amd_memory_lock refused on every thread: named, and nothing is recorded as pinned.
// hsa_amd_memory_unlock refused when pinned memory hmr allocated is freed: named, and the
// memory stays allocated, pinned and mapped (unmapping pinned pages would leave the runtime a
// registration of whatever is mapped there next); the next free works.
TEST_F(RocrCallFailures, RefusedPinningAndUnpinningKeepEverythingConsistent) {
  init();
  fake().set_failure("hsa_amd_memory_lock", kOutOfResources);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    if (i % 2 == 0) {
      return unless_failed_naming(
          iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::host_alloc).status(), HMR_ENOMEM,
          "hsa_amd_memory_lock");
    }
    std::vector<char> pages(2 * kPage);
    char* aligned = reinterpret_cast<char*>(
        (reinterpret_cast<uintptr_t>(pages.data()) + kPage - 1) / kPage * kPage);
    return unless_failed_naming(iface_->host_register(aligned, kPage), HMR_ENOMEM,
                                "hsa_amd_memory_lock");
  });
  EXPECT_EQ(failures, kNoFailures);
  fake().set_failure("hsa_amd_memory_lock", 0);

  Result<void*> pinned = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::host_alloc);
  ASSERT_TRUE(pinned.ok()) << pinned.status().reason();
  fake().set_failure("hsa_amd_memory_unlock", kError);
  EXPECT_EQ(unless_failed_naming(iface_->mem_free(*pinned), HMR_EIO, "hsa_amd_memory_unlock"), "");
  fake().set_failure("hsa_amd_memory_unlock", 0);
  std::memset(*pinned, 0x5a, kPage);  // still mapped
  Result<PointerInfo> still = iface_->query(*pinned, kPage);
  ASSERT_TRUE(still.ok()) << still.status().reason();
  EXPECT_EQ(still->kind, MemoryKind::host_alloc);  // still pinned
  EXPECT_TRUE(iface_->mem_free(*pinned).ok());
  EXPECT_EQ(iface_->query(*pinned, 1).status().code(), HMR_ENOENT);
}

// hsa_amd_memory_pool_allocate refused on every thread: named, nothing allocated.
// hsa_amd_memory_pool_free refused: named, the memory is still there, and freeing it again
// works.
TEST_F(RocrCallFailures, RefusedPoolAllocationsAndFreesLoseNothing) {
  init();
  fake().set_failure("hsa_amd_memory_pool_allocate", kOutOfResources);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    const MemoryKind kind = i < 2 ? MemoryKind::device_only : MemoryKind::managed;
    return unless_failed_naming(
        iface_->mem_alloc(DeviceId{static_cast<uint64_t>(i % 2)}, kPage, kind).status(),
        HMR_ENOMEM, "hsa_amd_memory_pool_allocate");
  });
  EXPECT_EQ(failures, kNoFailures);
  fake().set_failure("hsa_amd_memory_pool_allocate", 0);

  std::vector<void*> made(kCallFailureThreads);
  for (int i = 0; i < kCallFailureThreads; ++i) {
    Result<void*> ptr = iface_->mem_alloc(DeviceId{static_cast<uint64_t>(i % 2)}, kPage,
                                          i < 2 ? MemoryKind::device_only : MemoryKind::managed);
    ASSERT_TRUE(ptr.ok()) << ptr.status().reason();
    made[static_cast<size_t>(i)] = *ptr;
  }
  fake().set_failure("hsa_amd_memory_pool_free", kError);
  failures = on_threads([&](int i) -> std::string {
    void* ptr = made[static_cast<size_t>(i)];
    std::string why = unless_failed_naming(iface_->mem_free(ptr), HMR_EIO,
                                           "hsa_amd_memory_pool_free");
    if (why.empty() && !iface_->query(ptr, 1).ok()) why = "a refused free lost the allocation";
    return why;
  });
  EXPECT_EQ(failures, kNoFailures);
  fake().set_failure("hsa_amd_memory_pool_free", 0);
  for (void* ptr : made) EXPECT_TRUE(iface_->mem_free(ptr).ok());
}

// hsa_amd_agents_allow_access refused for managed memory, and the free of the unshared
// allocation refused too: both calls are named, and the allocation that could not be given
// back is said to stay allocated.
TEST_F(RocrCallFailures, AnUnsharedAllocationThatCannotBeFreedIsSaidToStay) {
  init();
  fake().set_failure("hsa_amd_agents_allow_access", kError);
  fake().set_failure("hsa_amd_memory_pool_free", kOutOfResources);
  Result<void*> refused = iface_->mem_alloc(DeviceId{0}, kPage, MemoryKind::managed);
  fake().set_failure("hsa_amd_agents_allow_access", 0);
  fake().set_failure("hsa_amd_memory_pool_free", 0);
  EXPECT_EQ(unless_failed_naming(refused.status(), HMR_EIO, "hsa_amd_agents_allow_access"), "");
  EXPECT_NE(refused.status().reason().find("hsa_amd_memory_pool_free"), std::string::npos)
      << refused.status().reason();
  EXPECT_NE(refused.status().reason().find("stays allocated"), std::string::npos)
      << refused.status().reason();
}

// hsa_amd_register_deallocation_callback refused on every thread: each watch names the call
// and leaves no runtime registration; watches made afterwards hear their frees.
TEST_F(RocrCallFailures, RefusedFreeWatchesLeaveNothingRegistered) {
  init();
  std::vector<void*> bases(kCallFailureThreads);
  std::vector<PointerInfo> infos(kCallFailureThreads);
  for (int i = 0; i < kCallFailureThreads; ++i) {
    bases[static_cast<size_t>(i)] = alloc(i % 2, kPage);
    Result<PointerInfo> info = iface_->query(bases[static_cast<size_t>(i)], 1);
    ASSERT_TRUE(info.ok());
    infos[static_cast<size_t>(i)] = *info;
  }
  FreeCounter counter;
  fake().set_failure("hsa_amd_register_deallocation_callback", kOutOfResources);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    return unless_failed_naming(
        iface_->watch_free(infos[static_cast<size_t>(i)], &FreeCounter::record, &counter),
        HMR_ENOMEM, "hsa_amd_register_deallocation_callback");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(fake().notifier_count(), 0);
  fake().set_failure("hsa_amd_register_deallocation_callback", 0);
  failures = on_threads([&](int i) -> std::string {
    const Status watched =
        iface_->watch_free(infos[static_cast<size_t>(i)], &FreeCounter::record, &counter);
    return watched.ok() ? std::string() : watched.reason();
  });
  EXPECT_EQ(failures, kNoFailures);
  for (void* base : bases) free_allocation(base);
  EXPECT_EQ(counter.frees.load(), kCallFailureThreads);
}

// hsa_amd_portable_export_dmabuf refused on every thread: named, no fd left open.
TEST_F(RocrCallFailures, RefusedExportsLeakNoFdOnEveryThread) {
  init();
  std::vector<void*> bases(kCallFailureThreads);
  for (void*& base : bases) base = alloc(0, kPage);
  const int fds = open_fd_count();
  fake().set_failure("hsa_amd_portable_export_dmabuf", kOutOfResources);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    return unless_failed_naming(
        iface_->export_dmabuf({bases[static_cast<size_t>(i)], kPage}).status(), HMR_ENOMEM,
        "hsa_amd_portable_export_dmabuf");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(open_fd_count(), fds);
  fake().set_failure("hsa_amd_portable_export_dmabuf", 0);
  Result<DmabufExport> exported = iface_->export_dmabuf({bases[0], kPage});
  EXPECT_TRUE(exported.ok()) << exported.status().reason();
}

}  // namespace
}  // namespace hmr::rocr
