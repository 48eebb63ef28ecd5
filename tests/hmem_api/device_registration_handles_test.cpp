// A callback NIC's registration handle is the application's (hmr.h: "yours") and need not be
// unique: this one returns NULL for every registration and tells them apart by key.  The
// device cache keeps each registration's host shadow (or dma-buf share) and pinned bytes by
// registration; with two registrations under one handle, the second shadow was unmapped at
// once under its live NIC registration, both MRs reported the first one's shadow, and the
// pinned-byte account never came back down.  Found by a review; the callback NIC now gives each
// registration a handle of its own (nic/callback/callback_nic.h, CallbackRegistration).
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include <sys/mman.h>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

struct NullHandleNic {
  std::atomic<size_t> held{0};
  std::atomic<uint64_t> next_key{1};
  std::vector<void*> registered;  // the host addresses the NIC was given
};

int null_handle_reg(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char*, size_t) {
  auto& nic = *static_cast<NullHandleNic*>(context);
  nic.registered.push_back(const_cast<void*>(request->addr));
  nic.held.fetch_add(1);
  return hmr_test::hand_out_key(mr, nic.next_key);
}

int null_handle_dereg(void* context, const hmr_nic_mr* mr, char*, size_t) {
  if (mr->handle != nullptr) return -HMR_EINVAL;  // hmr must hand back what reg gave
  static_cast<NullHandleNic*>(context)->held.fetch_sub(1);
  return 0;
}

TEST(DeviceRegistrationHandles, TwoHostShadowsUnderOneNicHandleStayApart) {
  NullHandleNic nic;
  // No dma-buf, no peer-direct: host shadows.
  hmr_nic_callbacks callbacks =
      callback_nic(&nic, HMR_NIC_CB_PINS_HOST_MEMORY, null_handle_reg, null_handle_dereg);
  DomainPtr domain = open_callback_domain(callbacks, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);

  auto a = std::make_unique<FakeAllocation>(0, 65536);
  auto b = std::make_unique<FakeAllocation>(0, 65536);
  {
    MrPtr ma = register_ok(domain.get(), a->get(), 65536);
    MrPtr mb = register_ok(domain.get(), b->get(), 65536);
    ASSERT_TRUE(ma && mb);
    const hmr_mr_info ia = mr_info(ma.get());
    const hmr_mr_info ib = mr_info(mb.get());
    ASSERT_EQ(ia.path, HMR_MR_PATH_HOST_SHADOW);
    ASSERT_EQ(ib.path, HMR_MR_PATH_HOST_SHADOW);
    EXPECT_NE(ia.shadow, ib.shadow) << "two allocations report one shadow";
    // Every shadow the NIC was given is still mapped while its registration lives.
    ASSERT_EQ(nic.registered.size(), 2u);
    for (void* address : nic.registered) {
      EXPECT_EQ(msync(address, 4096, MS_ASYNC), 0) << address << " was unmapped under its registration";
    }
    // b's bytes reach b's shadow, and a's is untouched.
    std::vector<uint8_t> bytes(65536, 0x5b);
    ASSERT_EQ(fake_cuda().poke(b->address(), bytes.data(), bytes.size()), 0);
    ASSERT_EQ(hmr_mr_sync(mb.get(), 0, 0, HMR_SYNC_FROM_DEVICE), 0) << hmr_last_error();
    EXPECT_EQ(static_cast<uint8_t*>(ib.shadow)[0], 0x5b);
    EXPECT_NE(static_cast<uint8_t*>(ia.shadow)[0], 0x5b);
  }
  ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();
  const hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_EQ(nic.held.load(), 0u);
  EXPECT_EQ(stats.nic_pinned_bytes, 0u) << "the pinned-byte account drifted";
}

}  // namespace
}  // namespace hmr_hmem_test
