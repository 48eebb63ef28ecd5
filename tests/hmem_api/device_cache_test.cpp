// The device-memory cache through the public ABI: repeated registrations hit; a cuMemFree and
// a new allocation at the same address misses (the CUDA buffer id is part of the key) and drops
// the old entry; FI_MR_CUDA_CACHE_MONITOR_ENABLED=0 leaves device memory uncached; explicit
// invalidation (hmr_mem_invalidate, hmr_mem_free) drops entries.
#include <cstring>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

constexpr size_t kAlloc = 64 * 1024;

TEST(DeviceCache, RepeatedRegistrationHitsAndExportsOnce) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const int exports = export_calls();
  MrPtr first = register_ok(domain.get(), device.get(), 8192);
  MrPtr second = register_ok(domain.get(), device.get(), 4096);  // inside the first
  ASSERT_TRUE(first && second);
  const hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_EQ(stats.cache_misses, 1u);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.nic_registrations, 1u);
  EXPECT_EQ(export_calls(), exports + 1);
  EXPECT_EQ(mr_info(first.get()).cached, 1);
  EXPECT_EQ(mr_info(second.get()).cached, 1);
  EXPECT_EQ(hmr_mr_key(first.get()), hmr_mr_key(second.get()));
  EXPECT_EQ(mr_info(second.get()).dmabuf_fd, mr_info(first.get()).dmabuf_fd);
}

TEST(DeviceCache, FreeAndNewAllocationAtTheSameAddressMissesAndDropsTheOldEntry) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  auto device = std::make_unique<FakeAllocation>(0, kAlloc);
  const unsigned long long address = device->address();
  {
    MrPtr mr = register_ok(domain.get(), device->get(), 4096);
    ASSERT_TRUE(mr);
  }
  const hmr_domain_stats before = stats_of(domain.get());
  ASSERT_EQ(before.cache_regions, 1u);
  device->free_now();
  FakeAllocation again(0, kAlloc);
  ASSERT_EQ(again.address(), address) << "the fake hands a freed address out first";

  const int exports = export_calls();
  MrPtr mr = register_ok(domain.get(), again.get(), 4096);
  ASSERT_TRUE(mr);
  const hmr_domain_stats after = stats_of(domain.get());
  EXPECT_EQ(after.cache_hits, before.cache_hits) << "a stale entry was handed out";
  EXPECT_EQ(after.cache_misses, before.cache_misses + 1);
  EXPECT_EQ(after.cache_invalidations, before.cache_invalidations + 1);
  EXPECT_EQ(after.cache_regions, 1u);
  EXPECT_EQ(export_calls(), exports + 1);  // the new allocation's own export
}

TEST(DeviceCache, AnMrStillHoldingTheOldAllocationKeepsItWhileTheNewOneGetsItsOwn) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  auto device = std::make_unique<FakeAllocation>(0, kAlloc);
  MrPtr old_mr = register_ok(domain.get(), device->get(), 4096);
  ASSERT_TRUE(old_mr);
  const uint64_t old_key = hmr_mr_key(old_mr.get());
  device->free_now();
  FakeAllocation again(0, kAlloc);
  MrPtr new_mr = register_ok(domain.get(), again.get(), 4096);
  ASSERT_TRUE(new_mr);
  EXPECT_NE(hmr_mr_key(new_mr.get()), old_key);
  EXPECT_EQ(stats_of(domain.get()).cache_hits, 0u);
  EXPECT_EQ(stats_of(domain.get()).nic_registrations, 2u);
  old_mr.reset();  // the old registration goes with its last holder
  EXPECT_EQ(stats_of(domain.get()).nic_deregistrations, 1u);
}

// With a device runtime loaded, a repeated registration of host memory is still served from
// the cache without asking the runtime: a live host entry is proof enough that the range is
// the host mapping it was (the monitor drops it when the range is unmapped).  The first
// registration asks (that is how hmr knows it is host memory), the second must not.
TEST(DeviceCache, HostHitsDoNotAskTheLoadedDeviceRuntime) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_test::Pages pages(2 * 4096);
  FakeAllocation device(0, kAlloc);  // the runtime is loaded and owns memory
  hmr_mr* first = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), pages.data(), 4096, kAccess, 0, 0, 0, &first, nullptr), 0)
      << hmr_last_error();
  ASSERT_EQ(hmr_mr_close(first), 0);
  const int asked = fake_cuda().call_count("cuPointerGetAttributes");
  const hmr_domain_stats before = stats_of(domain.get());
  hmr_mr* second = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), pages.data(), 4096, kAccess, 0, 0, 0, &second, nullptr), 0)
      << hmr_last_error();
  EXPECT_EQ(stats_of(domain.get()).cache_hits, before.cache_hits + 1);
  EXPECT_EQ(fake_cuda().call_count("cuPointerGetAttributes"), asked)
      << "a host cache hit asked the device runtime";
  EXPECT_EQ(mr_info(second).iface, HMR_HMEM_SYSTEM);
  ASSERT_EQ(hmr_mr_close(second), 0);
  // Device memory is never taken for a host hit: it is classified and goes its own way.
  hmr_mr* on_device = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), device.get(), 4096, kAccess, 0, 0, 0, &on_device, nullptr),
            0) << hmr_last_error();
  EXPECT_EQ(mr_info(on_device).iface, HMR_HMEM_CUDA);
  ASSERT_EQ(hmr_mr_close(on_device), 0);
}

TEST(DeviceCache, MonitorDisabledByEnvironmentLeavesDeviceMemoryUncached) {
  FakeAllocation device(0, kAlloc);
  ScopedEnv off("FI_MR_CUDA_CACHE_MONITOR_ENABLED", "0");
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr first = register_ok(domain.get(), device.get(), 4096);
  MrPtr second = register_ok(domain.get(), device.get(), 4096);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(mr_info(first.get()).cached, 0);
  EXPECT_EQ(mr_info(first.get()).path, HMR_MR_PATH_DMABUF);
  hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.nic_registrations, 2u);

  std::vector<char> host(4096);
  MrPtr host_first = register_ok(domain.get(), host.data(), host.size());
  MrPtr host_second = register_ok(domain.get(), host.data(), host.size());
  EXPECT_EQ(stats_of(domain.get()).cache_hits, 1u) << "host memory is still cached";
}

TEST(DeviceCache, ExplicitInvalidationDropsEntriesOfOneDomainOrOfAll) {
  FakeAllocation device(0, kAlloc);
  auto one = open_domain(nullptr);
  auto two = open_domain(nullptr);
  ASSERT_TRUE(one && two);
  { MrPtr a = register_ok(one.get(), device.get(), 4096); }
  { MrPtr b = register_ok(two.get(), device.get(), 4096); }
  ASSERT_EQ(stats_of(one.get()).cache_regions, 1u);
  ASSERT_EQ(stats_of(two.get()).cache_regions, 1u);

  ASSERT_HMR_OK(hmr_mem_invalidate(one.get(), device.get(), 1));
  EXPECT_EQ(stats_of(one.get()).cache_regions, 0u);
  EXPECT_EQ(stats_of(one.get()).cache_invalidations, 1u);
  EXPECT_EQ(stats_of(two.get()).cache_regions, 1u);

  { MrPtr b = register_ok(two.get(), device.get(), 4096); }
  EXPECT_EQ(stats_of(two.get()).cache_hits, 1u);
  ASSERT_HMR_OK(hmr_mem_invalidate(nullptr, device.get(), kAlloc));
  EXPECT_EQ(stats_of(two.get()).cache_regions, 0u);
  { MrPtr b = register_ok(two.get(), device.get(), 4096); }
  EXPECT_EQ(stats_of(two.get()).cache_misses, 2u);
}

// After an invalidation the memory may be new (runtimes without allocation ids cannot say):
// the next registration gets an export of its own, while an MR holding the old one keeps it.
TEST(DeviceCache, InvalidationRetiresTheSharedExportForLaterRegistrations) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const int exports = export_calls();
  MrPtr held = register_ok(domain.get(), device.get(), 4096);
  ASSERT_TRUE(held);
  ASSERT_HMR_OK(hmr_mem_invalidate(nullptr, device.get(), kAlloc));
  MrPtr fresh = register_ok(domain.get(), device.get(), 4096);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(export_calls(), exports + 2);
  EXPECT_NE(mr_info(fresh.get()).dmabuf_fd, mr_info(held.get()).dmabuf_fd);
  EXPECT_NE(hmr_mr_key(fresh.get()), hmr_mr_key(held.get()));
}

TEST(DeviceCache, MemFreeDropsTheRegistrationsOfWhatItFrees) {
  void* memory = nullptr;
  ASSERT_HMR_OK(hmr_mem_alloc(HMR_HMEM_CUDA, 0, kAlloc, HMR_MEM_DEVICE_ONLY, &memory));
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  { MrPtr mr = register_ok(domain.get(), static_cast<char*>(memory) + 4096, 4096); }
  ASSERT_EQ(stats_of(domain.get()).cache_regions, 1u);
  const int fds = open_fd_count();
  ASSERT_HMR_OK(hmr_mem_free(HMR_HMEM_CUDA, memory));
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 0u);
  EXPECT_EQ(stats_of(domain.get()).cache_invalidations, 1u);
  EXPECT_EQ(open_fd_count(), fds - 1) << "the allocation's dma-buf closes with its last entry";
}

}  // namespace
}  // namespace hmr_hmem_test
