// ROCr memory in the device cache: the runtime's deallocation callbacks are its monitor.
// The fake ROCr runtime (tests/fakes/fake_hsa.c) runs them from hsa_amd_memory_pool_free, as
// the real one does.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/fakes/fake_hsa_control.h"
#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

constexpr size_t kAlloc = 64 * 1024;

// The fake's own free: what the application's hsa_amd_memory_pool_free does.
fake_hsa_free_fn fake_hsa_free() {
  static const fake_hsa_free_fn free_fn = [] {
    void* handle = dlopen(HMR_FAKE_HSA_PATH, RTLD_NOW | RTLD_LOCAL);
    void* symbol = handle != nullptr ? dlsym(handle, "fake_hsa_free") : nullptr;
    if (symbol == nullptr) {
      std::fprintf(stderr, "cannot reach the fake ROCr runtime %s\n", HMR_FAKE_HSA_PATH);
      std::abort();
    }
    return reinterpret_cast<fake_hsa_free_fn>(symbol);
  }();
  return free_fn;
}

TEST(RocrFreeMonitor, FreeingRocrMemoryDropsItsCachedRegistrations) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  void* memory = nullptr;
  ASSERT_HMR_OK(hmr_mem_alloc(HMR_HMEM_ROCR, 0, kAlloc, HMR_MEM_DEVICE_ONLY, &memory));
  {
    MrPtr mr = register_ok(domain.get(), memory, 8192);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).iface, HMR_HMEM_ROCR);
    EXPECT_EQ(mr_info(mr.get()).cached, 1);
  }
  { MrPtr again = register_ok(domain.get(), memory, 4096); }
  hmr_domain_stats stats = stats_of(domain.get());
  ASSERT_EQ(stats.cache_regions, 1u);
  ASSERT_EQ(stats.cache_hits, 1u);

  // The application frees it with the runtime itself; hmr hears it through the callback.
  ASSERT_EQ(fake_hsa_free()(memory), 0);
  stats = stats_of(domain.get());
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.cache_invalidations, 1u);
  EXPECT_EQ(stats.nic_deregistrations, stats.nic_registrations);
}

template <typename Fn>
Fn fake_hsa_function(const char* name) {
  void* handle = dlopen(HMR_FAKE_HSA_PATH, RTLD_NOW | RTLD_LOCAL);
  void* symbol = handle != nullptr ? dlsym(handle, name) : nullptr;
  if (symbol == nullptr) {
    std::fprintf(stderr, "cannot reach %s in the fake ROCr runtime %s\n", name, HMR_FAKE_HSA_PATH);
    std::abort();
  }
  return reinterpret_cast<Fn>(symbol);
}

// A VRAM allocation of the fake's GPU `gpu` (fake_hsa_alloc), or nullptr with a failure.
void* rocr_alloc(int gpu) {
  static const auto alloc = fake_hsa_function<fake_hsa_alloc_fn>("fake_hsa_alloc");
  void* memory = nullptr;
  EXPECT_EQ(alloc(gpu, kAlloc, &memory), 0);
  return memory;
}

int pointer_queries() {
  static const auto count = fake_hsa_function<fake_hsa_call_count_fn>("fake_hsa_call_count");
  return count("hsa_amd_pointer_info");
}

uint64_t reg_key_close(hmr_domain* domain, const void* ptr, size_t len) {
  MrPtr mr = register_ok(domain, ptr, len);
  return mr ? hmr_mr_key(mr.get()) : HMR_KEY_NOTAVAIL;
}

// Issue 26: memory whose free the runtime reports (ROCr's deallocation callbacks) needs no
// question to the runtime on a hit: the callback drops its registrations when it is freed, so
// one still cached is still the allocation's.  The first hit asks (and leaves the hint,
// core/recent_device_ranges.h); later ones ask nothing.  Freed and allocated again at the same
// address, the old registration is never handed out: the new memory is a miss.
TEST(RocrFreeMonitor, HitsOfMemoryWhoseFreeIsReportedAskTheRuntimeNothing) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  void* memory = rocr_alloc(0);
  ASSERT_NE(memory, nullptr);
  const uint64_t key = reg_key_close(domain.get(), memory, 8192);  // the miss
  EXPECT_EQ(reg_key_close(domain.get(), memory, 4096), key);         // a hit that asks
  int before = pointer_queries();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(reg_key_close(domain.get(), static_cast<char*>(memory) + (i % 4) * 1024, 4096), key);
  }
  EXPECT_EQ(pointer_queries() - before, 0) << "hits asked the runtime";
  EXPECT_EQ(stats_of(domain.get()).cache_hits, 21u);

  ASSERT_EQ(fake_hsa_free()(memory), 0);  // the callback drops the registration
  void* again = rocr_alloc(0);
  ASSERT_EQ(again, memory) << "the fake hands a freed address out first";
  const hmr_domain_stats stats = stats_of(domain.get());
  const uint64_t new_key = reg_key_close(domain.get(), again, 4096);
  EXPECT_NE(new_key, key) << "STALE HIT: the freed allocation's registration";
  EXPECT_EQ(stats_of(domain.get()).cache_misses, stats.cache_misses + 1);
  EXPECT_EQ(reg_key_close(domain.get(), again, 4096), new_key);  // asks once more: a new hint
  before = pointer_queries();
  EXPECT_EQ(reg_key_close(domain.get(), again, 4096), new_key);
  EXPECT_EQ(pointer_queries() - before, 0);
  ASSERT_EQ(fake_hsa_free()(again), 0);
}

// Threads hitting one allocation without asking the runtime, while another thread allocates,
// registers twice (the second a hit that asks nothing) and frees at one address again and
// again: each round's memory gets a registration of its own, never the freed one's, and the
// hitters always get their allocation's.
TEST(RocrFreeMonitor, UnaskedHitsBesideFreesAtTheSameAddressAreNeverStale) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  void* stable = rocr_alloc(0);
  ASSERT_NE(stable, nullptr);
  const uint64_t stable_key = reg_key_close(domain.get(), stable, 4096);
  HittingThreads hitters(domain.get(), stable, 4096, stable_key);
  int wrong = 0;
  uint64_t previous = HMR_KEY_NOTAVAIL;
  void* address = nullptr;
  for (int round = 0; round < 50; ++round) {
    void* churn = rocr_alloc(1);
    ASSERT_NE(churn, nullptr);
    if (address != nullptr && churn != address) wrong += 1000;  // (the test's premise)
    address = churn;
    const uint64_t key = reg_key_close(domain.get(), churn, 4096);
    if (key == previous) ++wrong;  // the freed allocation's registration
    for (int i = 0; i < 3; ++i) {
      if (reg_key_close(domain.get(), churn, 4096) != key) ++wrong;
    }
    previous = key;
    ASSERT_EQ(fake_hsa_free()(churn), 0);
  }
  EXPECT_EQ(wrong + hitters.stop(), 0);
  EXPECT_EQ(stats_of(domain.get()).mr_open, 0u);
  EXPECT_EQ(hmr_domain_cache_flush(domain.get()), 0);
  ASSERT_EQ(fake_hsa_free()(stable), 0);
}

// Where the free cannot be watched (the runtime refused the callback), the memory is
// registered without the cache: ROCr names pool memory by nothing but its base, so a free and
// an allocation at the same address would look the same, and the freed allocation's
// registration was handed out for the new one (found by a review: "STALE HIT").  Once the
// runtime takes the callback, the memory is cached again.
TEST(RocrFreeMonitor, MemoryWhoseFreeCannotBeWatchedIsNotCached) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  const auto set_failure = fake_hsa_function<fake_hsa_set_failure_fn>("fake_hsa_set_failure");
  void* memory = rocr_alloc(0);
  ASSERT_NE(memory, nullptr);
  set_failure("hsa_amd_register_deallocation_callback", 0x1000 /* HSA_STATUS_ERROR */);
  uint64_t unwatched = HMR_KEY_NOTAVAIL;
  {
    MrPtr mr = register_ok(domain.get(), memory, 8192);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).cached, 0);
    unwatched = hmr_mr_key(mr.get());
  }
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 0u);
  ASSERT_EQ(fake_hsa_free()(memory), 0);  // no callback: hmr hears nothing
  void* again = rocr_alloc(0);
  ASSERT_EQ(again, memory) << "the fake hands the address out again";
  set_failure("hsa_amd_register_deallocation_callback", 0);
  const uint64_t key = reg_key_close(domain.get(), again, 4096);
  EXPECT_NE(key, unwatched) << "STALE HIT: the freed allocation's registration";
  EXPECT_EQ(reg_key_close(domain.get(), again, 4096), key) << "watched now: cached";
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 1u);
  ASSERT_EQ(fake_hsa_free()(again), 0);
}

// A free on another thread may run the callback before hsa_amd_register_deallocation_callback
// returns.  It used to be delivered to nobody, and the watch table then believed in a runtime
// registration the runtime had dropped: every later allocation at the address counted as
// watched without one, its free was never heard, and a third allocation there was handed the
// second one's registration (found by a review).
TEST(RocrFreeMonitor, AFreeWhileTheCallbackIsRegisteredLeavesNoBeliefInAWatch) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  const auto free_racing = fake_hsa_function<fake_hsa_free_after_next_notifier_fn>(
      "fake_hsa_free_after_next_notifier");
  void* first = rocr_alloc(0);
  ASSERT_NE(first, nullptr);
  free_racing(first);
  hmr_mr* mr = nullptr;
  // Registering memory freed under it: refused, or registered without the cache.
  if (hmr_mr_reg(domain.get(), first, 4096, kAccess, 0, 0, 0, &mr, nullptr) == 0) {
    EXPECT_EQ(mr_info(mr).cached, 0);
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
  void* second = rocr_alloc(0);
  ASSERT_EQ(second, first);
  const uint64_t key = reg_key_close(domain.get(), second, 4096);
  EXPECT_EQ(reg_key_close(domain.get(), second, 4096), key);
  ASSERT_EQ(fake_hsa_free()(second), 0);
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 0u) << "the second allocation's free was not heard";
  void* third = rocr_alloc(0);
  ASSERT_EQ(third, first);
  EXPECT_NE(reg_key_close(domain.get(), third, 4096), key) << "STALE HIT after free + realloc";
  ASSERT_EQ(fake_hsa_free()(third), 0);
}

// A NIC (peer-direct: it takes the device address) during whose registration another thread
// frees the memory, once: the free is reported after hmr set the watch and before the
// registration is in the cache.
struct FreeingNic {
  void* free_during_next = nullptr;
  uint64_t next_key = 1;
};
int freeing_reg(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char*,
                size_t) {
  auto& nic = *static_cast<FreeingNic*>(context);
  if (nic.free_during_next != nullptr && nic.free_during_next == request->addr) {
    nic.free_during_next = nullptr;
    EXPECT_EQ(fake_hsa_free()(const_cast<void*>(request->addr)), 0);
  }
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = nic.next_key++;
  return 0;
}
int freeing_dereg(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

// The free found nothing to drop (the registration was not filed yet), and an entry filed
// after it would be served to the next allocation at the address: the device cache does not
// file a registration whose range was invalidated since the memory was observed
// (RegistrationCache::get's `since`, read before the watch was set).
TEST(RocrFreeMonitor, AFreeDuringTheRegistrationLeavesNothingInTheCache) {
  FreeingNic nic;
  hmr_nic_callbacks callbacks =
      callback_nic(&nic, HMR_NIC_CB_PEER_DIRECT, freeing_reg, freeing_dereg);
  hmr_test::DomainPtr domain = open_callback_domain(callbacks);
  ASSERT_TRUE(domain);
  void* first = rocr_alloc(0);
  ASSERT_NE(first, nullptr);
  nic.free_during_next = first;
  const uint64_t key = reg_key_close(domain.get(), first, 4096);
  EXPECT_EQ(nic.free_during_next, nullptr) << "the NIC was not asked";
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 0u) << "the freed memory's entry was kept";
  void* second = rocr_alloc(0);
  ASSERT_EQ(second, first);
  EXPECT_NE(reg_key_close(domain.get(), second, 4096), key) << "STALE HIT after free + realloc";
  ASSERT_EQ(fake_hsa_free()(second), 0);
}

TEST(RocrFreeMonitor, MonitorDisabledByEnvironmentLeavesRocrMemoryUncached) {
  ScopedEnv off("FI_MR_ROCR_CACHE_MONITOR_ENABLED", "0");
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  void* memory = nullptr;
  ASSERT_HMR_OK(hmr_mem_alloc(HMR_HMEM_ROCR, 0, kAlloc, HMR_MEM_DEVICE_ONLY, &memory));
  {
    MrPtr mr = register_ok(domain.get(), memory, 8192);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).cached, 0);
  }
  EXPECT_EQ(stats_of(domain.get()).cache_regions, 0u);
  ASSERT_HMR_OK(hmr_mem_free(HMR_HMEM_ROCR, memory));
}

// Issue 26's "at most one driver query per hit", with two runtimes loaded: this binary loads
// the fake CUDA driver and the fake ROCr runtime, and CUDA comes first in detection order.  A
// hit of ROCr memory asks ROCr once and the CUDA driver nothing: a domain asks only the
// runtimes whose memory it has cached, and for declared memory only the declared one (as the
// full path verifies a declaration with that runtime alone).  Before, each such hit asked the
// CUDA driver first.  (A hint is not trusted after hmr_mem_invalidate, so every hit here asks.)
TEST(RocrFreeMonitor, AHitOfRocrMemoryAsksNoOtherRuntime) {
  std::vector<char> unrelated(4096);
  for (const bool cuda_cached_too : {false, true}) {
    SCOPED_TRACE(cuda_cached_too ? "CUDA memory cached too" : "only ROCr memory cached");
    auto domain = open_domain("peer_direct=1");
    ASSERT_TRUE(domain);
    FakeAllocation cuda(0, kAlloc);
    if (cuda_cached_too) reg_key_close(domain.get(), cuda.get(), 4096);
    void* memory = rocr_alloc(0);
    ASSERT_NE(memory, nullptr);
    const uint64_t key = reg_key_close(domain.get(), memory, 8192);  // the miss
    const hmr_domain_stats before = stats_of(domain.get());
    const int cuda_before = fake_cuda().call_count("*");
    const int rocr_before = pointer_queries();
    constexpr int kRounds = 10;
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_EQ(hmr_mem_invalidate(domain.get(), unrelated.data(), unrelated.size()), 0);
      EXPECT_EQ(reg_key_close(domain.get(), memory, 4096), key);  // undeclared
      ASSERT_EQ(hmr_mem_invalidate(domain.get(), unrelated.data(), unrelated.size()), 0);
      MrPtr declared = register_ok(domain.get(), memory, 4096, HMR_HMEM_ROCR, 0);
      ASSERT_TRUE(declared);
      EXPECT_EQ(hmr_mr_key(declared.get()), key);
    }
    EXPECT_EQ(stats_of(domain.get()).cache_hits, before.cache_hits + 2 * kRounds);
    EXPECT_EQ(pointer_queries() - rocr_before, 2 * kRounds) << "ROCr questions per hit";
    // With CUDA memory cached in the domain too, an undeclared hit asks CUDA first (detection
    // order); a declared one never does.
    EXPECT_EQ(fake_cuda().call_count("*") - cuda_before, cuda_cached_too ? kRounds : 0)
        << "CUDA driver calls in " << 2 * kRounds << " hits of ROCr memory";
    ASSERT_EQ(fake_hsa_free()(memory), 0);
  }
}

}  // namespace
}  // namespace hmr_hmem_test
