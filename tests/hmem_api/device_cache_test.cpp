// The device-memory cache through the public ABI: repeated registrations hit; a cuMemFree and
// a new allocation at the same address misses (the CUDA buffer id is part of the key) and drops
// the old entry; FI_MR_CUDA_CACHE_MONITOR_ENABLED=0 leaves device memory uncached; explicit
// invalidation (hmr_mem_invalidate, hmr_mem_free) drops entries.  Host shadows are cached and
// shared the same way.
#include <array>
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

// A host shadow (a NIC that cannot reach the device, copies allowed) is cached like an export:
// a registration inside a cached one is a hit that shares the shadow, hmr_mr_query and
// hmr_mr_sync of the inner MR address its own part of it, and a free and reallocation at the
// same address gets a new shadow filled from the new memory.  hmr-perftest --mem cuda on
// libfabric tcp (an H100, docs/gpu.md) registered a new shadow for every message before.
// A host shadow over the pinned-byte bound on its own (the NIC's max_pinned here; RLIMIT_MEMLOCK
// alike) is refused before it is mapped and filled: it was copied whole from the device, then
// refused (a review's finding).
TEST(DeviceCache, AHostShadowOverThePinnedBoundIsRefusedBeforeItIsFilled) {
  FakeAllocation device(0, 1 << 20);
  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  auto domain = open_domain("max_pinned=65536", HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  const int copies_before = fake_cuda().call_count("cuMemcpyDtoH_v2");
  hmr_mr* mr = nullptr;
  EXPECT_EQ(register_attr(domain.get(), device.get(), 1 << 20, HMR_HMEM_SYSTEM, 0, 0, &mr),
            -HMR_ENOMEM);
  EXPECT_NE(std::string(hmr_last_error()).find("host shadow"), std::string::npos)
      << hmr_last_error();
  EXPECT_EQ(fake_cuda().call_count("cuMemcpyDtoH_v2"), copies_before) << "filled, then refused";
  MrPtr fits = register_ok(domain.get(), device.get(), 16384);  // within the bound: a shadow
  ASSERT_TRUE(fits);
  EXPECT_GT(fake_cuda().call_count("cuMemcpyDtoH_v2"), copies_before) << "filled from the device";
  EXPECT_EQ(mr_info(fits.get()).path, HMR_MR_PATH_HOST_SHADOW);
}

TEST(DeviceCache, HostShadowsAreCachedAndSharedByTheMrsInside) {
  auto device = std::make_unique<FakeAllocation>(0, kAlloc);
  const std::vector<uint8_t> initial(kAlloc, 0x11);
  ASSERT_EQ(fake_cuda().poke(device->address(), initial.data(), initial.size()), 0);
  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  auto domain = open_domain(nullptr, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  MrPtr outer = register_ok(domain.get(), device->get(), 16384);
  MrPtr inner = register_ok(domain.get(), at(device->get(), 4096), 4096);
  ASSERT_TRUE(outer && inner);
  const hmr_domain_stats stats = stats_of(domain.get());
  EXPECT_EQ(stats.cache_misses, 1u);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.nic_registrations, 1u);
  const hmr_mr_info outer_info = mr_info(outer.get());
  const hmr_mr_info inner_info = mr_info(inner.get());
  EXPECT_EQ(inner_info.path, HMR_MR_PATH_HOST_SHADOW);
  EXPECT_EQ(inner_info.cached, 1);
  ASSERT_NE(outer_info.shadow, nullptr);
  EXPECT_EQ(inner_info.shadow, static_cast<uint8_t*>(outer_info.shadow) + 4096);
  uint64_t outer_base = 0;
  uint64_t inner_base = 0;
  uint8_t key[16];
  size_t key_size = sizeof key;
  ASSERT_HMR_OK(hmr_mr_raw_attr(outer.get(), &outer_base, key, &key_size, 0));
  key_size = sizeof key;
  ASSERT_HMR_OK(hmr_mr_raw_attr(inner.get(), &inner_base, key, &key_size, 0));
  EXPECT_EQ(inner_base, outer_base + 4096);  // a VIRT_ADDR peer targets the shadow

  // The NIC wrote the inner MR's part of the shadow: its sync reaches its part of the device.
  std::memset(inner_info.shadow, 0x5a, 100);
  ASSERT_HMR_OK(hmr_mr_sync(inner.get(), 0, 100, HMR_SYNC_TO_DEVICE));
  std::vector<uint8_t> seen(4096 + 200);
  ASSERT_EQ(fake_cuda().peek(device->address(), seen.data(), seen.size()), 0);
  EXPECT_EQ(seen[4095], 0x11);
  EXPECT_EQ(seen[4096], 0x5a);
  EXPECT_EQ(seen[4096 + 99], 0x5a);
  EXPECT_EQ(seen[4096 + 100], 0x11);

  // Freed and allocated again at the same address: a new entry, filled from the new memory.
  inner.reset();
  outer.reset();
  const unsigned long long address = device->address();
  device->free_now();
  FakeAllocation again(0, kAlloc);
  ASSERT_EQ(again.address(), address) << "the fake hands a freed address out first";
  const std::vector<uint8_t> fresh(kAlloc, 0x22);
  ASSERT_EQ(fake_cuda().poke(again.address(), fresh.data(), fresh.size()), 0);
  MrPtr renewed = register_ok(domain.get(), again.get(), 16384);
  ASSERT_TRUE(renewed);
  const hmr_domain_stats after = stats_of(domain.get());
  EXPECT_EQ(after.cache_hits, stats.cache_hits) << "a stale shadow was handed out";
  EXPECT_EQ(after.cache_misses, stats.cache_misses + 1);
  const auto* shadow = static_cast<const uint8_t*>(mr_info(renewed.get()).shadow);
  ASSERT_NE(shadow, nullptr);
  EXPECT_EQ(shadow[4096], 0x22);
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

// Small pool allocations share pages (the fake packs them at 512 bytes, tests/fakes/
// fake_cuda_pool.c).  A host shadow of one holds its bytes alone, and what the NIC wrote into
// it reaches that allocation and never its neighbours in the same page.
TEST(DeviceCache, AHostShadowOfASmallPoolAllocationNeverWritesItsNeighbours) {
  std::array<unsigned long long, 3> small{};
  for (auto& address : small) ASSERT_EQ(fake_cuda().alloc_pooled(0, 1000, &address), 0);
  ASSERT_EQ(small[2] / 4096, small[0] / 4096) << "the fake packs small pool allocations";
  for (size_t i = 0; i < small.size(); ++i) {
    const std::vector<uint8_t> fill(1000, static_cast<uint8_t>(0x10 + i));
    ASSERT_EQ(fake_cuda().poke(small[i], fill.data(), fill.size()), 0);
  }
  {
    ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
    auto domain = open_domain(nullptr, HMR_DOMAIN_ALLOW_HMEM_COPY);
    ASSERT_TRUE(domain);
    MrPtr mr = register_ok(domain.get(), as_pointer(small[1]), 1000);
    ASSERT_TRUE(mr);
    const hmr_mr_info info = mr_info(mr.get());
    ASSERT_EQ(info.path, HMR_MR_PATH_HOST_SHADOW);
    const auto* shadow = static_cast<uint8_t*>(info.shadow);
    EXPECT_EQ(shadow[0], 0x11);
    EXPECT_EQ(shadow[999], 0x11);
    std::memset(info.shadow, 0x77, 1000);
    ASSERT_HMR_OK(hmr_mr_sync(mr.get(), 0, 1000, HMR_SYNC_TO_DEVICE));
  }
  std::vector<uint8_t> seen(1000);
  for (size_t i = 0; i < small.size(); ++i) {
    ASSERT_EQ(fake_cuda().peek(small[i], seen.data(), seen.size()), 0);
    const uint8_t expected = i == 1 ? 0x77 : static_cast<uint8_t>(0x10 + i);
    EXPECT_EQ(seen.front(), expected) << i;
    EXPECT_EQ(seen.back(), expected) << i;
  }
  for (const auto address : small) EXPECT_EQ(fake_cuda().free(address), 0);
}

}  // namespace
}  // namespace hmr_hmem_test
