// hl-thunk calls the SynapseAI iface makes, made to fail (fake_hlthunk.c: set_failure): each
// failure is an error code with a reason naming the call, never a crash, a leak or lost
// device memory, and the same call works once the library does.
//
// hl-thunk returns -errno (or 0 for a handle or an address) with errno set (hlthunk.h); the
// habanalabs driver answers EBUSY to a device's ioctls while the device is being reset
// (hl_device_operational in common/habanalabs_ioctl.c), which any call may meet.
#include <gtest/gtest.h>
#include <unistd.h>

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
  const size_t page_ = hmem::host_page_size();
  int fds_at_start_ = 0;
  std::optional<SynapseaiIface> iface_{std::in_place};
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

}  // namespace
}  // namespace hmr::synapseai
