// The device hit path (core/hit_path.cpp, Domain::try_device_hit): a cached registration of
// CUDA memory through hmr_mr_reg takes one pass, like a host hit — one question to the driver
// (cuPointerGetAttributes: the allocation's identity), a lock-free lookup, a pooled handle —
// and never hands out a registration of memory that was freed: free and reallocation at the
// same address, stream-ordered pool memory, a forked child.  Counted on the fake CUDA driver,
// which counts every entry point.  (VMM unmap and remap: tests/hmem/cuda_vmm_range_test.cpp
// checks that identify() sees it, which is all this path relies on.)
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

constexpr size_t kAlloc = 64 * 1024;

int driver_calls() { return fake_cuda().call_count("*"); }

// hmr_mr_reg + hmr_mr_key + hmr_mr_close, as a transport registers a buffer it was handed.
uint64_t reg_key_close(hmr_domain* domain, const void* ptr, size_t len) {
  hmr_mr* mr = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain, ptr, len, kAccess, 0, 0, 0, &mr, nullptr), 0) << hmr_last_error();
  if (mr == nullptr) return HMR_KEY_NOTAVAIL;
  const uint64_t key = hmr_mr_key(mr);
  EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  return key;
}

TEST(DeviceHitPath, AHitAsksTheDriverOnceAndTheNicNever) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const uint64_t key = reg_key_close(domain.get(), device.get(), 8192);  // the miss
  const hmr_domain_stats before = stats_of(domain.get());
  const int calls_before = driver_calls();
  constexpr int kHits = 100;
  for (int i = 0; i < kHits; ++i) {
    // The whole range, and ranges inside it: all served by the one registration.
    const size_t offset = (i % 4) * 1024;
    EXPECT_EQ(reg_key_close(domain.get(), at(device.get(), offset), 4096), key);
  }
  EXPECT_EQ(driver_calls() - calls_before, kHits) << "driver calls per device hit";
  const hmr_domain_stats after = stats_of(domain.get());
  EXPECT_EQ(after.cache_hits, before.cache_hits + kHits);
  EXPECT_EQ(after.nic_registrations, before.nic_registrations);
  EXPECT_EQ(after.mr_open, 0u);

  // What a hit MR is, when asked (a rare call: it is answered in full).
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), device.get(), 4096, kAccess, 0, 0, 0, &mr, nullptr), 0);
  const hmr_mr_info info = mr_info(mr);
  EXPECT_EQ(info.iface, HMR_HMEM_CUDA);
  EXPECT_EQ(info.kind, HMR_MEM_DEVICE_ONLY);
  EXPECT_EQ(info.cached, 1);
  EXPECT_EQ(info.path, HMR_MR_PATH_DMABUF);
  EXPECT_GE(info.dmabuf_fd, 0);
  EXPECT_EQ(stats_of(domain.get()).mr_open, 1u);
  EXPECT_EQ(hmr_mr_close(mr), 0);
}

// HMR_CUDA_FREES_REPORTED: the application promises to report every free of CUDA memory it
// registered (hmr_mem_invalidate or hmr_mem_free first).  Then a thread's repeated hit asks
// the driver nothing (core/recent_device_ranges.h), and a reported free and reallocation at
// the same address still never hits the old registration.  Without the promise each hit asks
// once (AHitAsksTheDriverOnceAndTheNicNever).
TEST(DeviceHitPath, WithFreesReportedByTheApplicationAHitAsksTheDriverNothing) {
  setenv("HMR_CUDA_FREES_REPORTED", "1", 1);
  auto domain = open_domain(nullptr);
  unsetenv("HMR_CUDA_FREES_REPORTED");  // read at the domain's open
  ASSERT_TRUE(domain);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    FakeAllocation device(0, kAlloc);
    const uint64_t key = reg_key_close(domain.get(), device.get(), 8192);  // the miss
    EXPECT_EQ(reg_key_close(domain.get(), device.get(), 8192), key);     // asks once, remembers
    const hmr_domain_stats before = stats_of(domain.get());
    const int calls_before = driver_calls();
    constexpr int kHits = 100;
    for (int i = 0; i < kHits; ++i) {
      EXPECT_EQ(reg_key_close(domain.get(), at(device.get(), (i % 4) * 1024), 4096), key);
    }
    EXPECT_EQ(driver_calls() - calls_before, 0) << "driver calls in " << kHits << " hits";
    const hmr_domain_stats after = stats_of(domain.get());
    EXPECT_EQ(after.cache_hits, before.cache_hits + kHits);
    EXPECT_EQ(after.nic_registrations, before.nic_registrations);
    // The free, reported as promised, and an allocation at the same address.
    void* const address = device.get();
    ASSERT_EQ(hmr_mem_invalidate(domain.get(), address, kAlloc), 0) << hmr_last_error();
    device.free_now();
    FakeAllocation again(0, kAlloc);
    ASSERT_EQ(again.get(), address) << "the fake hands a freed address out first";
    const uint64_t new_key = reg_key_close(domain.get(), again.get(), 8192);
    EXPECT_NE(new_key, key) << "STALE HIT: the freed allocation's registration";
    EXPECT_EQ(reg_key_close(domain.get(), again.get(), 8192), new_key);
    const int calls_again = driver_calls();
    EXPECT_EQ(reg_key_close(domain.get(), again.get(), 4096), new_key);
    EXPECT_EQ(driver_calls() - calls_again, 0) << "the new allocation's hits ask the driver";
  }
}

// The same promise with three threads hitting one allocation while another registers, hits,
// reports the free of and frees allocation after allocation at one address: nobody ever gets
// a registration of memory other than their own.
TEST(DeviceHitPath, WithFreesReportedThreadsHitWhileAnotherFreesAndReallocates) {
  setenv("HMR_CUDA_FREES_REPORTED", "1", 1);
  auto domain = open_domain(nullptr);
  unsetenv("HMR_CUDA_FREES_REPORTED");
  ASSERT_TRUE(domain);
  FakeAllocation stable(0, kAlloc);
  const uint64_t stable_key = reg_key_close(domain.get(), stable.get(), 4096);
  HittingThreads hitters(domain.get(), stable.get(), 4096, stable_key);
  int wrong = 0;
  uint64_t last_key = HMR_KEY_NOTAVAIL;
  for (int round = 0; round < 50; ++round) {
    FakeAllocation churn(0, kAlloc);
    const uint64_t key = reg_key_close(domain.get(), churn.get(), 4096);
    if (key == last_key) ++wrong;  // the previous allocation's registration
    for (int i = 0; i < 3; ++i) {
      if (reg_key_close(domain.get(), churn.get(), 4096) != key) ++wrong;
    }
    EXPECT_EQ(hmr_mem_invalidate(domain.get(), churn.get(), kAlloc), 0) << hmr_last_error();
    last_key = key;
  }
  EXPECT_EQ(wrong + hitters.stop(), 0);
  EXPECT_EQ(stats_of(domain.get()).mr_open, 0u);
}

// A host miss in a process whose device cache is empty asks nothing more than before; a host
// hit asks nothing at all (DeviceCache.HostHitsDoNotAskTheLoadedDeviceRuntime).
TEST(DeviceHitPath, NothingCachedOnTheDeviceNothingAsked) {
  FakeAllocation device(0, kAlloc);  // loaded, owns memory, but nothing of it is registered
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_test::Pages pages(4096);
  const int calls_before = driver_calls();
  reg_key_close(domain.get(), pages.data(), 4096);  // a host miss: classified once
  EXPECT_EQ(fake_cuda().call_count("*") - calls_before,
            1) << "the host miss asked the driver more than classification does";
}

// Host memory mapped where device memory was freed: its registration is never the device
// memory's, and its hits ask the driver nothing (host hits come first and look at no device
// hint; a device hit left before the free changes nothing for them).
TEST(DeviceHitPath, HostMemoryWhereDeviceMemoryWasFreedHitsWithoutTheDriver) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  FakeAllocation device(0, kAlloc);
  const uint64_t key = reg_key_close(domain.get(), device.get(), 4096);  // the miss
  EXPECT_EQ(reg_key_close(domain.get(), device.get(), 4096), key);      // a hit
  int calls_before = driver_calls();
  EXPECT_EQ(reg_key_close(domain.get(), device.get(), 4096), key);
  EXPECT_EQ(driver_calls() - calls_before, 1) << "a device hit";
  void* const address = device.get();
  device.free_now();
  // Host memory where the device memory was (the fake keeps its freed range reserved,
  // PROT_NONE; the kernel lets a fixed mapping replace it, as it would a freed CUDA range).
  void* host = mmap(address, kAlloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                    -1, 0);
  ASSERT_EQ(host, address);
  std::memset(host, 1, 4096);
  const uint64_t host_key = reg_key_close(domain.get(), host, 4096);  // a miss
  EXPECT_NE(host_key, key) << "STALE HIT: the freed device memory's registration";
  calls_before = driver_calls();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(reg_key_close(domain.get(), host, 4096), host_key);
  EXPECT_EQ(driver_calls() - calls_before, 0) << "host hits asked the driver";
  EXPECT_EQ(hmr_domain_cache_flush(domain.get()), 0);
  // Reserved again for the fake's next allocations there.
  ASSERT_EQ(mmap(address, kAlloc, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                 -1, 0),
            address);
}

TEST(DeviceHitPath, FreedAndAllocatedAgainAtTheSameAddressNeverHitsTheOldEntry) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    FakeAllocation device(0, kAlloc);
    const uint64_t key = reg_key_close(domain.get(), device.get(), 4096);
    EXPECT_EQ(reg_key_close(domain.get(), device.get(), 4096), key) << "not a hit";
    const void* address = device.get();
    device.free_now();
    FakeAllocation again(0, kAlloc);
    ASSERT_EQ(again.get(), address) << "the fake hands a freed address out first";
    const hmr_domain_stats before = stats_of(domain.get());
    const uint64_t new_key = reg_key_close(domain.get(), again.get(), 4096);
    const hmr_domain_stats after = stats_of(domain.get());
    EXPECT_NE(new_key, key) << "STALE HIT: the old allocation's registration";
    EXPECT_EQ(after.cache_hits, before.cache_hits);
    EXPECT_EQ(after.cache_misses, before.cache_misses + 1);
    EXPECT_EQ(reg_key_close(domain.get(), again.get(), 4096), new_key) << "the new one hits";
  }
}

// cuMemAllocAsync's pool memory: a pool hands out addresses again and again; each allocation
// has its own identity, so a hit is only ever one of the allocation registered.
TEST(DeviceHitPath, StreamOrderedPoolMemoryHitsOnlyItsOwnAllocation) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  unsigned long long first = 0;
  ASSERT_EQ(fake_cuda().alloc_pooled(0, kAlloc, &first), 0);
  const uint64_t key = reg_key_close(domain.get(), as_pointer(first), 4096);
  const int calls_before = driver_calls();
  EXPECT_EQ(reg_key_close(domain.get(), as_pointer(first), 4096), key);
  EXPECT_EQ(driver_calls() - calls_before, 1);
  ASSERT_EQ(fake_cuda().free(first), 0);
  unsigned long long second = 0;
  ASSERT_EQ(fake_cuda().alloc_pooled(0, kAlloc, &second), 0);
  if (second == first) {
    EXPECT_NE(reg_key_close(domain.get(), as_pointer(second), 4096), key)
        << "STALE HIT: pool memory handed out again hit the freed allocation's registration";
  } else {
    EXPECT_NE(reg_key_close(domain.get(), as_pointer(second), 4096), key);
  }
  ASSERT_EQ(fake_cuda().free(second), 0);
}

// A child forked from the driver's process cannot use the driver (it answers
// NOT_INITIALIZED), and an inherited domain's cache stops caching there: the parent's device
// registration is never the child's answer.
TEST(DeviceHitPath, AForkedChildNeverGetsTheParentsDeviceRegistration) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const uint64_t key = reg_key_close(domain.get(), device.get(), 4096);
  ASSERT_EQ(reg_key_close(domain.get(), device.get(), 4096), key);
  const int stale = hmr_test::run_forked([&] {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain.get(), device.get(), 4096, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
      return 0;  // refused: not a stale answer
    }
    hmr_mr_info info{};
    info.size = sizeof info;
    const bool parents = hmr_mr_query(mr, &info) == 0 && info.iface == HMR_HMEM_CUDA &&
                         hmr_mr_key(mr) == key;
    hmr_mr_close(mr);
    return parents ? 1 : 0;
  });
  ASSERT_GE(stale, 0) << "the child could not be forked, or died of a signal";
  EXPECT_EQ(stale, 0) << "the child got the parent's cached device registration";
}

// Threads hitting the same device entries at once (the lock-free path), and one thread freeing
// and reallocating beside them: every key a thread got is one the allocation it asked about
// had, never an older one.
TEST(DeviceHitPath, ThreadsHitWhileAnotherFreesAndReallocates) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  FakeAllocation stable(0, kAlloc);
  const uint64_t stable_key = reg_key_close(domain.get(), stable.get(), 4096);
  HittingThreads hitters(domain.get(), stable.get(), 4096, stable_key);
  int wrong = 0;
  for (int round = 0; round < 50; ++round) {
    FakeAllocation churn(0, kAlloc);
    const uint64_t key = reg_key_close(domain.get(), churn.get(), 4096);
    if (reg_key_close(domain.get(), churn.get(), 4096) != key) ++wrong;
  }
  EXPECT_EQ(wrong + hitters.stop(), 0);
  EXPECT_EQ(stats_of(domain.get()).mr_open, 0u);
}

// hmr_mr_regattr declaring the memory (the NCCL plugin declares NCCL_PTR_CUDA buffers) hits
// the same way; a declaration the runtime contradicts is never a hit, and the full path says
// why.
TEST(DeviceHitPath, DeclaredRegistrationsHitAndWrongDeclarationsAreRefused) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr first = register_ok(domain.get(), device.get(), 8192, HMR_HMEM_CUDA, 0);
  ASSERT_TRUE(first);
  const uint64_t key = hmr_mr_key(first.get());
  const int calls_before = driver_calls();
  for (int i = 0; i < 10; ++i) {
    hmr_mr* mr = nullptr;
    ASSERT_EQ(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0, 0, &mr), 0)
        << hmr_last_error();
    EXPECT_EQ(hmr_mr_key(mr), key);
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
  EXPECT_EQ(driver_calls() - calls_before, 10) << "driver calls per declared device hit";
  hmr_mr* wrong = nullptr;
  EXPECT_EQ(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 1, 0, &wrong),
            -HMR_EINVAL)
      << "device 1 declared for memory of device 0";
  EXPECT_NE(std::string(hmr_last_error()).find("device"), std::string::npos) << hmr_last_error();
}

// An HMR_MR_HMEM application declares its memory: hmr_mr_reg (which declares nothing, so
// system memory) of device memory is refused, also when that memory is cached.
TEST(DeviceHitPath, AnHmemDomainNeverTakesUndeclaredDeviceMemoryForAHit) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr, 0, kSharingMode | HMR_MR_HMEM);
  ASSERT_TRUE(domain);
  MrPtr declared = register_ok(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0);
  ASSERT_TRUE(declared);
  hmr_mr* mr = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), device.get(), 4096, kAccess, 0, 0, 0, &mr, nullptr),
            -HMR_EINVAL);
}

}  // namespace
}  // namespace hmr_hmem_test
