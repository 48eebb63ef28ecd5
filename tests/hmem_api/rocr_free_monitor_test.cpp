// ROCr memory in the device cache: the runtime's deallocation callbacks are its monitor.
// The fake ROCr runtime (tests/fakes/fake_hsa.c) runs them from hsa_amd_memory_pool_free, as
// the real one does.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

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

}  // namespace
}  // namespace hmr_hmem_test
