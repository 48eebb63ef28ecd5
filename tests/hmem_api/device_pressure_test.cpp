// Device memory under NIC pressure (docs/semantics.md, "Under pressure"): dma-buf
// registrations of fake CUDA memory on a callback NIC that holds 8 registrations and refuses
// the next one, as an RDMA NIC out of keys does.  Idle cached exports are given back (the
// device cache's entries, and the host cache's first), and the registration is tried again.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

struct SmallNic {
  size_t capacity = 8;
  std::atomic<size_t> held{0}, most_held{0};
  std::atomic<uint64_t> refused{0}, next_key{1};
};

int take(SmallNic& nic, hmr_nic_mr* mr, char* reason, size_t reason_size) {
  size_t now = nic.held.load();
  do {
    if (now >= nic.capacity) {
      nic.refused.fetch_add(1);
      std::snprintf(reason, reason_size, "small NIC: %zu registrations in use", nic.capacity);
      return -HMR_ENOSPC;
    }
  } while (!nic.held.compare_exchange_weak(now, now + 1));
  if (now + 1 > nic.most_held.load()) nic.most_held.store(now + 1);
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = nic.next_key.fetch_add(1);
  return 0;
}

int small_register(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char* reason,
                   size_t reason_size) {
  return take(*static_cast<SmallNic*>(context), mr, reason, reason_size);
}

int small_deregister(void* context, const hmr_nic_mr*, char*, size_t) {
  static_cast<SmallNic*>(context)->held.fetch_sub(1);
  return 0;
}

TEST(DevicePressure, IdleDeviceRegistrationsAreGivenBackWhenTheNicRefuses) {
  SmallNic nic;
  hmr_nic_callbacks callbacks = callback_nic(&nic, HMR_NIC_CB_DMABUF, small_register, small_deregister);
  DomainPtr domain = open_callback_domain(callbacks);
  ASSERT_TRUE(domain);

  // 24 device allocations, each registered (exported as a dma-buf) and closed: idle in the
  // device cache, 8 of them at a time at most.
  std::vector<std::unique_ptr<FakeAllocation>> allocations;
  for (int i = 0; i < 24; ++i) allocations.push_back(std::make_unique<FakeAllocation>(0, 65536));
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < allocations.size(); ++i) {
      MrPtr mr = register_ok(domain.get(), allocations[i]->get(), 65536);
      ASSERT_TRUE(mr) << "allocation " << i << " (round " << round << ")";
      EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_DMABUF);
    }
  }
  EXPECT_LE(nic.most_held.load(), nic.capacity);
  EXPECT_GT(nic.refused.load(), 0u) << "the NIC was never full: the test proves nothing";
  hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_GE(stats.cache_pressure_evictions, 40u);
  EXPECT_GE(stats.nic_refusal_retries, 1u);
  EXPECT_EQ(stats.nic_refusals, 0u);

  // Eight held open: the ninth allocation is refused with the NIC's code and a reason.
  std::vector<MrPtr> open;
  for (size_t i = 0; i < 8; ++i) open.push_back(register_ok(domain.get(), allocations[i]->get(), 65536));
  hmr_mr* ninth = nullptr;
  EXPECT_EQ(register_attr(domain.get(), allocations[8]->get(), 65536, HMR_HMEM_SYSTEM, 0, 0, &ninth),
            -HMR_ENOSPC);
  EXPECT_EQ(ninth, nullptr);
  EXPECT_NE(std::string(hmr_last_error()).find("in use by an open MR"), std::string::npos)
      << hmr_last_error();
  open.clear();
  domain.reset();
  EXPECT_EQ(nic.held.load(), 0u) << "registrations left at the NIC after the domain closed";
}

}  // namespace
}  // namespace hmr_hmem_test
