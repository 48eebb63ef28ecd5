// The CUDA driver calls behind hmr_mr_sync, hmr_mem_alloc and hmr_mem_free made to fail, from
// several threads at once (the house standard: every driver call that can fail fails in a
// test, under threads).  Each caller gets the driver's error with a reason naming the call; no
// output is written, no byte moves, nothing is left held; and once the driver works again the
// same objects work, so no failure left hmr's state behind it.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/hmem_api/failing_calls.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

constexpr int kThreads = kFailureThreads;
constexpr size_t kBytes = 65536;
constexpr int kCudaErrorOutOfMemory = 2;
constexpr int kCudaErrorIllegalAddress = 700;

// Host-shadow MRs (no dma-buf, no peer-direct) of device memory, one per thread: a sync that
// the driver refuses in either direction fails with the driver's reason and moves no byte;
// the next one, with the driver working, moves them all.
TEST(CudaCallFailures, ShadowSyncsFailWithTheDriversReasonAndMoveNothing) {
  CountingNic nic;
  hmr_nic_callbacks callbacks = nic.callbacks(HMR_NIC_CB_PINS_HOST_MEMORY);
  DomainPtr domain = open_callback_domain(callbacks, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  std::vector<std::unique_ptr<FakeAllocation>> memory;
  std::vector<MrPtr> mrs;
  std::vector<uint8_t*> shadows;
  for (int i = 0; i < kThreads; ++i) {
    memory.push_back(std::make_unique<FakeAllocation>(0, kBytes));
    mrs.push_back(register_ok(domain.get(), memory.back()->get(), kBytes));
    ASSERT_TRUE(mrs.back());
    const hmr_mr_info info = mr_info(mrs.back().get());
    ASSERT_EQ(info.path, HMR_MR_PATH_HOST_SHADOW);
    shadows.push_back(static_cast<uint8_t*>(info.shadow));
  }
  for (int i = 0; i < kThreads; ++i) {
    const std::vector<uint8_t> device_bytes(kBytes, static_cast<uint8_t>(0xd0 + i));
    ASSERT_EQ(fake_cuda().poke(memory[static_cast<size_t>(i)]->address(), device_bytes.data(), kBytes), 0);
    std::memset(shadows[static_cast<size_t>(i)], 0x5a, kBytes);
  }

  {
    FailingCall from("cuMemcpyDtoH_v2", kCudaErrorIllegalAddress);
    FailingCall to("cuMemcpyHtoD_v2", kCudaErrorIllegalAddress);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      hmr_mr* mr = mrs[static_cast<size_t>(i)].get();
      for (int round = 0; round < 50; ++round) {
        std::string why = reason_unless(hmr_mr_sync(mr, 0, 0, HMR_SYNC_FROM_DEVICE), HMR_EIO, "cuMemcpyDtoH");
        if (why.empty()) why = reason_unless(hmr_mr_sync(mr, 0, 0, HMR_SYNC_TO_DEVICE), HMR_EIO, "cuMemcpyHtoD");
        if (!why.empty()) return why;
      }
      return {};
    });
    for (int i = 0; i < kThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << "thread " << i;
  }
  for (int i = 0; i < kThreads; ++i) {
    const size_t at = static_cast<size_t>(i);
    EXPECT_EQ(shadows[at][0], 0x5a) << "a failed sync wrote the shadow";
    EXPECT_EQ(shadows[at][kBytes - 1], 0x5a);
    uint8_t device_byte = 0;
    ASSERT_EQ(fake_cuda().peek(memory[at]->address() + kBytes - 1, &device_byte, 1), 0);
    EXPECT_EQ(device_byte, 0xd0 + i) << "a failed sync wrote the device memory";
  }

  // The driver works again: the same MRs sync.
  const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    if (hmr_mr_sync(mrs[static_cast<size_t>(i)].get(), 0, 0, HMR_SYNC_FROM_DEVICE) != 0) return hmr_last_error();
    return {};
  });
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(failures[static_cast<size_t>(i)], "") << "thread " << i;
    EXPECT_EQ(shadows[static_cast<size_t>(i)][kBytes - 1], 0xd0 + i);
  }
  mrs.clear();
  ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
  EXPECT_EQ(nic.held.load(), 0) << "a NIC registration was left behind";
}

// hmr_mem_alloc of each kind whose driver call fails: the driver's error, *ptr untouched; then
// hmr_mem_free whose cuMemFree / cuMemFreeHost fails: the error, and the memory is still
// there to free once the driver works again (hmr did not forget it).
TEST(CudaCallFailures, AllocationsAndFreesFailWithTheDriversReason) {
  struct Kind {
    hmr_mem_kind kind;
    const char* alloc_call;  // the fake's entry point
    const char* free_call;
    const char* named;       // what the reason must name
    const char* free_named;
  };
  const Kind kinds[] = {
      {HMR_MEM_DEVICE_ONLY, "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAlloc", "cuMemFree"},
      {HMR_MEM_HOST_ALLOC, "cuMemHostAlloc", "cuMemFreeHost", "cuMemHostAlloc", "cuMemFreeHost"},
      {HMR_MEM_MANAGED, "cuMemAllocManaged", "cuMemFree_v2", "cuMemAllocManaged", "cuMemFree"},
  };
  for (const Kind& k : kinds) {
    SCOPED_TRACE(k.alloc_call);
    {
      FailingCall failing(k.alloc_call, kCudaErrorOutOfMemory);
      const std::vector<std::string> failures = on_threads([&](int) -> std::string {
        void* ptr = reinterpret_cast<void*>(0x1);
        std::string why = reason_unless(hmr_mem_alloc(HMR_HMEM_CUDA, 0, kBytes, k.kind, &ptr), HMR_ENOMEM, k.named);
        if (why.empty() && ptr != reinterpret_cast<void*>(0x1)) why = "*ptr written on failure";
        return why;
      });
      for (const std::string& why : failures) EXPECT_EQ(why, "");
    }
    std::vector<void*> allocated(kThreads, nullptr);
    for (void*& ptr : allocated) ASSERT_HMR_OK(hmr_mem_alloc(HMR_HMEM_CUDA, 0, kBytes, k.kind, &ptr));
    {
      FailingCall failing(k.free_call, kCudaErrorIllegalAddress);
      const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
        return reason_unless(hmr_mem_free(HMR_HMEM_CUDA, allocated[static_cast<size_t>(i)]), HMR_EIO,
                             k.free_named);
      });
      for (const std::string& why : failures) EXPECT_EQ(why, "");
    }
    for (void* ptr : allocated) EXPECT_EQ(hmr_mem_free(HMR_HMEM_CUDA, ptr), 0) << hmr_last_error();
  }
}

}  // namespace
}  // namespace hmr_hmem_test
