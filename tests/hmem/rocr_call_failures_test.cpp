// ROCr runtime calls the iface makes, made to fail (tests/fakes/fake_hsa.c,
// fake_hsa_set_failure and fake_hsa_set_failure_once): each failure is an error code with a
// reason naming the call, never a crash, a leak or a lost allocation.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rocr/rocr_iface.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_temp_file.h"

namespace hmr::rocr {
namespace {

using hmem::PointerInfo;
using hmr::testing::FakeHsa;
using hmr::testing::fake_hsa;
using hmr::testing::TempFile;

constexpr int kError = 0x1000;            // HSA_STATUS_ERROR
constexpr size_t kPage = 4096;

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

}  // namespace
}  // namespace hmr::rocr
