// SynapseAI, hl-thunk and SCAL calls the iface makes, made to fail (fake_synapse.c,
// fake_hlthunk.c, fake_scal.c: set_failure and set_failure_once): each failure is an error
// code with a reason naming the call, never a crash, a leak or lost device memory, and the
// same call works once the library does.  Calls on paths threads share (allocation, free,
// exports) fail on four threads at once.  synInitialize, synDeviceGetCount, the allocation's
// and mapping's and exports' single-thread refusals are in synapseai_iface_test.cpp.
//
// hl-thunk returns -errno (or 0 for a handle or an address) with errno set (hlthunk.h); the
// habanalabs driver answers EBUSY to a device's ioctls while the device is being reset
// (hl_device_operational in common/habanalabs_ioctl.c), which any call may meet.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "hmem/page_range.h"
#include "synapseai/synapseai_iface.h"
#include "tests/hmem/call_failures.h"
#include "tests/hmem/fd_checks.h"
#include "tests/hmem/synapseai_fake_library.h"

namespace hmr::synapseai {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmr::testing::fake_hlthunk;
using hmr::testing::fake_hlthunk_path;
using hmr::testing::fake_scal;
using hmr::testing::fake_scal_path;
using hmr::testing::fake_synapse;
using hmr::testing::fake_synapse_path;
using hmr::testing::kCallFailureThreads;
using hmr::testing::on_threads;
using hmr::testing::open_fd_count;
using hmr::testing::unless_failed_naming;

const std::vector<std::string> kNoFailures(kCallFailureThreads);
const std::string kBusId = "0000:33:00.0";  // fake hl-thunk's device 0 (tests/fakes/fake_hlthunk.c)

const void* as_pointer(uint64_t address) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

class SynapseaiCallFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HMR_SYNAPSEAI_LIBRARY", fake_synapse_path(), 1);
    setenv("HMR_HLTHUNK_LIBRARY", fake_hlthunk_path(), 1);
    setenv("HMR_SCAL_LIBRARY", fake_scal_path(), 1);
    setenv("HLS_MODULE_ID", std::to_string(FAKE_HLTHUNK_MODULE_ID_0).c_str(), 1);
    fake_synapse().reset();
    fake_scal().reset();
    hlthunk().reset();
    fds_at_start_ = open_fd_count();
  }
  void TearDown() override {
    iface_.reset();
    for (uint64_t address : app_allocations_) fake_synapse().free(address);
    fake_synapse().reset();
    fake_scal().reset();
    hlthunk().reset();
    EXPECT_EQ(open_fd_count(), fds_at_start_);
    unsetenv("HMR_SYNAPSEAI_LIBRARY");
    unsetenv("HMR_HLTHUNK_LIBRARY");
    unsetenv("HMR_SCAL_LIBRARY");
    unsetenv("HLS_MODULE_ID");
  }

  const testing::FakeHlthunk& hlthunk() const { return fake_hlthunk(fake_hlthunk_path()); }
  SynapseaiIface& iface() { return *iface_; }
  void init() {
    const Status started = iface().init();
    ASSERT_TRUE(started.ok()) << started.reason();
  }
  void* alloc(size_t len) {
    Result<void*> ptr = iface().mem_alloc(DeviceId{0}, len, MemoryKind::device_only);
    EXPECT_TRUE(ptr.ok()) << ptr.status().reason();
    return ptr.ok() ? *ptr : nullptr;
  }
  // The application holds Gaudi device 0 as SynapseAI does (synapseai_iface_test.cpp's
  // acquire_as_synapse): a device fd, its memory mapped, SCAL's "global_hbm" pool a granule
  // above the mapping's start.  Returns where the pool starts.
  uint64_t acquire_as_synapse() {
    constexpr uint64_t kGranule = 2ull << 20;
    constexpr uint64_t kPoolSize = 16ull << 20;
    const int fd = hlthunk().open(HLTHUNK_DEVICE_DONT_CARE, nullptr);
    EXPECT_GE(fd, 0);
    const uint64_t handle = hlthunk().memory_alloc(fd, kPoolSize + kGranule, 0, true, false);
    const uint64_t mapping = hlthunk().memory_map(fd, handle, 0);
    EXPECT_NE(mapping, 0u);
    EXPECT_EQ(fake_scal().attach(fd, mapping, mapping + kGranule, kPoolSize), 0);
    EXPECT_EQ(fake_synapse().acquire_mapped(0, fd, mapping + kGranule, kPoolSize), 0);
    return mapping + kGranule;
  }
  uint64_t app_alloc(size_t len) {
    uint64_t address = 0;
    EXPECT_EQ(fake_synapse().alloc(0, len, &address), 0);
    app_allocations_.push_back(address);
    return address;
  }

  const size_t page_ = hmem::host_page_size();
  int fds_at_start_ = 0;
  std::optional<SynapseaiIface> iface_{std::in_place};
  std::vector<uint64_t> app_allocations_;
};

// ---- hlthunk_device_memory_free --------------------------------------------------------------

// A free hl-thunk refuses after the unmap succeeded: the device memory is still allocated and
// only its handle can free it.  Before the fix HlthunkMemory dropped the handle, so the
// memory leaked until the device was closed and a second mem_free said "not memory hmr
// allocated".  Now the handle is kept, the reason names the call, and mem_free of the same
// address frees it, even after a new allocation took that address and was freed in turn.
TEST_F(SynapseaiCallFailures, ARefusedFreeKeepsTheHandleForTheNextFree) {
  init();
  void* base = alloc(page_);
  ASSERT_NE(base, nullptr);
  hlthunk().set_failure("hlthunk_device_memory_free", EBUSY);
  EXPECT_EQ(unless_failed_naming(iface().mem_free(base), HMR_EBUSY, "hlthunk_device_memory_free"),
            "");
  hlthunk().set_failure("hlthunk_device_memory_free", 0);
  EXPECT_EQ(hlthunk().live_handles(), 1);  // still allocated
  EXPECT_EQ(hlthunk().live_mappings(), 0);
  // Unmapped: the address is no longer Gaudi memory of hmr's.
  EXPECT_EQ(iface().query(base, 1).status().code(), HMR_ENOENT);

  // The driver hands the address out again first: that allocation is freed by address first.
  void* again = alloc(page_);
  ASSERT_EQ(again, base);
  EXPECT_EQ(hlthunk().live_handles(), 2);
  EXPECT_TRUE(iface().mem_free(again).ok());
  EXPECT_EQ(hlthunk().live_handles(), 1);
  const Status retried = iface().mem_free(base);  // the memory whose free was refused
  EXPECT_TRUE(retried.ok()) << retried.reason();
  EXPECT_EQ(hlthunk().live_handles(), 0);
  EXPECT_EQ(iface().mem_free(base).code(), HMR_EINVAL);  // nothing left there
}

// Refused on every thread at once: each keeps its handle; each is freed once hl-thunk frees.
TEST_F(SynapseaiCallFailures, RefusedFreesOnEveryThreadLoseNoHandle) {
  init();
  std::vector<void*> bases(kCallFailureThreads);
  for (void*& base : bases) base = alloc(page_);
  hlthunk().set_failure("hlthunk_device_memory_free", EIO);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    return unless_failed_naming(iface().mem_free(bases[static_cast<size_t>(i)]), HMR_EIO,
                                "hlthunk_device_memory_free");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(hlthunk().live_handles(), kCallFailureThreads);
  hlthunk().set_failure("hlthunk_device_memory_free", 0);
  failures = on_threads([&](int i) -> std::string {
    const Status freed = iface().mem_free(bases[static_cast<size_t>(i)]);
    return freed.ok() ? std::string() : freed.reason();
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(hlthunk().live_handles(), 0);
}

// A handle still refused at destruction is tried once more and logged; closing the device
// then releases the memory (the driver frees what a closed device held).
TEST_F(SynapseaiCallFailures, AHandleStillRefusedAtDestructionIsLoggedAndReleasedByTheClose) {
  init();
  void* base = alloc(page_);
  ASSERT_NE(base, nullptr);
  hlthunk().set_failure("hlthunk_device_memory_free", EBUSY);
  EXPECT_FALSE(iface().mem_free(base).ok());
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  hlthunk().set_failure("hlthunk_device_memory_free", 0);
  EXPECT_NE(log.find("hlthunk_device_memory_free"), std::string::npos) << log;
  EXPECT_EQ(hlthunk().call_count("hlthunk_device_memory_free"), 2);  // tried again
  EXPECT_EQ(hlthunk().live_handles(), 0);
  EXPECT_EQ(hlthunk().open_devices(), 0);
}

// ---- the rest of hl-thunk --------------------------------------------------------------------

// hlthunk_close refused at destruction: logged with its name, never a crash.
TEST_F(SynapseaiCallFailures, ARefusedCloseIsLogged) {
  init();
  void* base = alloc(page_);
  ASSERT_NE(base, nullptr);
  hlthunk().set_failure("hlthunk_close", EIO);
  ::testing::internal::CaptureStderr();
  iface_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  hlthunk().set_failure("hlthunk_close", 0);
  EXPECT_NE(log.find("hlthunk_close"), std::string::npos) << log;
  EXPECT_EQ(hlthunk().live_handles(), 0);  // freed before the close
}

// hlthunk_open_by_module_id refused on every thread: each allocation names it, no device is
// left open, and the next allocation opens it.
TEST_F(SynapseaiCallFailures, ARefusedOpenOnEveryThreadLeavesNothingOpen) {
  init();
  hlthunk().set_failure("hlthunk_open_by_module_id", EACCES);
  std::vector<std::string> failures = on_threads([&](int) -> std::string {
    return unless_failed_naming(
        iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only).status(), HMR_EPERM,
        "hlthunk_open_by_module_id");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(hlthunk().open_devices(), 0);
  hlthunk().set_failure("hlthunk_open_by_module_id", 0);
  void* base = alloc(page_);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(hlthunk().open_devices(), 1);
  EXPECT_TRUE(iface().mem_free(base).ok());
}

// hlthunk_get_pci_bus_id_from_fd refused: allocations work; the memory has no sys_dev while
// the refusal lasts, and the location is asked again (before, it stayed empty until the device
// was reopened), then kept.
TEST_F(SynapseaiCallFailures, AnUnreadableBusIdIsAskedAgainUntilRead) {
  init();
  hlthunk().set_failure("hlthunk_get_pci_bus_id_from_fd", EIO);
  void* base = alloc(page_);
  ASSERT_NE(base, nullptr);
  Result<hmem::PointerInfo> info = iface().query(base, 1);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->sys_dev, "");
  EXPECT_EQ(iface().capabilities(DeviceId{0})->sys_dev, "");
  hlthunk().set_failure("hlthunk_get_pci_bus_id_from_fd", 0);
  std::vector<std::string> failures = on_threads([&](int) -> std::string {
    Result<hmem::PointerInfo> read = iface().query(base, 1);
    if (!read.ok()) return read.status().reason();
    return read->sys_dev == kBusId ? "" : "sys_dev '" + read->sys_dev + "'";
  });
  EXPECT_EQ(failures, kNoFailures);
  const int asked = hlthunk().call_count("hlthunk_get_pci_bus_id_from_fd");
  EXPECT_EQ(iface().capabilities(DeviceId{0})->sys_dev, kBusId);
  EXPECT_EQ(iface().query(base, 1)->sys_dev, kBusId);
  EXPECT_EQ(hlthunk().call_count("hlthunk_get_pci_bus_id_from_fd"), asked);  // kept
  EXPECT_TRUE(iface().mem_free(base).ok());
}

// hlthunk_device_memory_alloc and hlthunk_device_memory_map refused on every thread: named,
// no handle left.
TEST_F(SynapseaiCallFailures, RefusedAllocationsOnEveryThreadLeaveNoHandle) {
  init();
  void* first = alloc(page_);  // the device is open
  ASSERT_NE(first, nullptr);
  struct Refusal {
    const char* call;
    int error;
    int code;
  };
  // (Named fields, not a structured binding: clang before 16 cannot capture one in a lambda.)
  for (const Refusal& refusal : {Refusal{"hlthunk_device_memory_alloc", ENOMEM, HMR_ENOMEM},
                                 Refusal{"hlthunk_device_memory_map", EBUSY, HMR_EBUSY}}) {
    SCOPED_TRACE(refusal.call);
    hlthunk().set_failure(refusal.call, refusal.error);
    std::vector<std::string> failures = on_threads([&](int) -> std::string {
      return unless_failed_naming(
          iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only).status(), refusal.code,
          refusal.call);
    });
    hlthunk().set_failure(refusal.call, 0);
    EXPECT_EQ(failures, kNoFailures);
    EXPECT_EQ(hlthunk().live_handles(), 1);
  }
  EXPECT_TRUE(iface().mem_free(first).ok());
}

// hlthunk_memory_unmap refused on every thread: the memory stays hmr's, mapped, and frees later.
TEST_F(SynapseaiCallFailures, RefusedUnmapsOnEveryThreadKeepTheMemory) {
  init();
  std::vector<void*> bases(kCallFailureThreads);
  for (void*& base : bases) base = alloc(page_);
  hlthunk().set_failure("hlthunk_memory_unmap", EBUSY);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    void* base = bases[static_cast<size_t>(i)];
    std::string why = unless_failed_naming(iface().mem_free(base), HMR_EBUSY,
                                           "hlthunk_memory_unmap");
    if (why.empty() && !iface().query(base, 1).ok()) why = "a refused unmap lost the memory";
    return why;
  });
  hlthunk().set_failure("hlthunk_memory_unmap", 0);
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(hlthunk().call_count("hlthunk_device_memory_free"), 0);
  for (void* base : bases) EXPECT_TRUE(iface().mem_free(base).ok());
  EXPECT_EQ(hlthunk().live_handles(), 0);
}

// The mapped-memory export of hmr's own memory refused on every thread: named, no fd left.
TEST_F(SynapseaiCallFailures, RefusedOwnExportsOnEveryThreadLeakNoFd) {
  init();
  void* base = alloc(4 * page_);
  ASSERT_NE(base, nullptr);
  const int fds = open_fd_count();
  hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", ENOMEM);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    return unless_failed_naming(
        iface().export_dmabuf({static_cast<char*>(base) + static_cast<size_t>(i) * page_, 64})
            .status(),
        HMR_ENOMEM, "hlthunk_device_mapped_memory_export_dmabuf_fd");
  });
  hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", 0);
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(open_fd_count(), fds);
  EXPECT_TRUE(iface().mem_free(base).ok());
}

// ---- SynapseAI and SCAL ----------------------------------------------------------------------

// synDriverGetVersion refused: the iface starts, with no version.
TEST_F(SynapseaiCallFailures, AnUnreadableDriverVersionStillStarts) {
  fake_synapse().set_failure("synDriverGetVersion", 26 /* synFail */);
  init();
  fake_synapse().set_failure("synDriverGetVersion", 0);
  EXPECT_EQ(iface().runtime_version(), "");
}

// Exports of memory the application allocated, from four threads, each refused by one of the
// calls on the way (synDeviceGetInfoV2, then SCAL's three): each names its call, no fd is
// left; then only one call of the four fails (set_failure_once) and one thread sees it.
TEST_F(SynapseaiCallFailures, RefusedPoolLookupsOnEveryThreadNameTheirCallAndLeakNoFd) {
  init();
  const uint64_t pool = acquire_as_synapse();
  const uint64_t app = app_alloc(4 * page_);
  ASSERT_EQ(app, pool);
  const int fds = open_fd_count();
  struct Refusal {
    bool synapse;
    const char* call;
    int code;
    int expected;
    const char* named;  // how the reason names the result
  };
  // SCAL's results as scal.h lists them (synapseai/scal_symbols.h), named in the reason.
  for (const Refusal& refusal :
       {Refusal{true, "synDeviceGetInfoV2", 26, HMR_EIO, "synFail (26)"},
        Refusal{false, "scal_get_handle_from_fd", -1, HMR_EIO, "SCAL_FAILURE (-1)"},
        Refusal{false, "scal_get_pool_handle_by_name", -11, HMR_EIO, "SCAL_NOT_FOUND (-11)"},
        Refusal{false, "scal_pool_get_infoV2", -5, HMR_ENOMEM, "SCAL_OUT_OF_MEMORY (-5)"},
        Refusal{false, "scal_pool_get_infoV2", -6, HMR_EAGAIN, "SCAL_NOT_READY (-6)"},
        Refusal{false, "scal_pool_get_infoV2", 99, HMR_EIO, "SCAL result 99"}}) {
    SCOPED_TRACE(refusal.named);
    if (refusal.synapse) {
      fake_synapse().set_failure(refusal.call, refusal.code);
    } else {
      fake_scal().set_failure(refusal.call, refusal.code);
    }
    std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      const Status refused =
          iface().export_dmabuf({as_pointer(app + static_cast<size_t>(i) * page_), 64}).status();
      std::string failure = unless_failed_naming(refused, refusal.expected, refusal.call);
      if (failure.empty() && refused.reason().find(refusal.named) == std::string::npos) {
        failure = "no '" + std::string(refusal.named) + "' in: " + refused.reason();
      }
      return failure;
    });
    EXPECT_EQ(failures, kNoFailures);
    EXPECT_EQ(open_fd_count(), fds);
    if (refusal.synapse) {
      fake_synapse().set_failure(refusal.call, 0);
    } else {
      fake_scal().set_failure(refusal.call, 0);
    }
  }
  fake_scal().set_failure_once("scal_pool_get_infoV2", -1, 3);
  std::atomic<int> refused{0};
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    Result<DmabufExport> exported =
        iface().export_dmabuf({as_pointer(app + static_cast<size_t>(i) * page_), 64});
    if (exported.ok()) return {};
    refused.fetch_add(1);
    return unless_failed_naming(exported.status(), HMR_EIO, "scal_pool_get_infoV2");
  });
  EXPECT_EQ(failures, kNoFailures);
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(open_fd_count(), fds);
}

}  // namespace
}  // namespace hmr::synapseai
