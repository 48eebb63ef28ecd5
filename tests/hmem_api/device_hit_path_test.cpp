// The device hit path (core/hit_path.cpp, Domain::try_device_hit): a cached registration of
// CUDA memory through hmr_mr_reg takes one pass, like a host hit — one question to the driver
// (cuPointerGetAttributes: the allocation's identity), a lock-free lookup, a pooled handle —
// and never hands out a registration of memory that was freed: free and reallocation at the
// same address, stream-ordered pool memory, memory imported from another process (CUDA IPC),
// a forked child.  Counted on the fake CUDA driver,
// which counts every entry point.  (VMM unmap and remap: tests/hmem/cuda_vmm_range_test.cpp
// checks that identify() sees it, which is all this path relies on.)
#include <sys/mman.h>
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/ipc_exporter.h"
#include "tests/hmem/fake_library.h"
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

// The promise kept by reporting a free to one domain only (a process with a domain per NIC):
// another domain that still holds the freed allocation's registration, and whose thread hit
// it (a hint, trusted while no free was reported), asks the driver at its next registration
// and registers the new allocation at the address.  It served the freed allocation's
// registration from its hint: the report to one domain did not move the generation.
TEST(DeviceHitPath, AFreeReportedToOneDomainSendsTheOthersBackToTheDriver) {
  setenv("HMR_CUDA_FREES_REPORTED", "1", 1);
  auto first = open_domain(nullptr);
  auto second = open_domain(nullptr);
  unsetenv("HMR_CUDA_FREES_REPORTED");
  ASSERT_TRUE(first && second);
  FakeAllocation device(0, kAlloc);
  reg_key_close(first.get(), device.get(), 8192);
  const uint64_t key = reg_key_close(second.get(), device.get(), 8192);  // the miss
  EXPECT_EQ(reg_key_close(second.get(), device.get(), 8192), key);      // asks once, remembers
  const int calls = driver_calls();
  EXPECT_EQ(reg_key_close(second.get(), device.get(), 8192), key);
  ASSERT_EQ(driver_calls() - calls, 0) << "the second domain's hint is not trusted: no test";
  void* const address = device.get();
  ASSERT_EQ(hmr_mem_invalidate(first.get(), address, kAlloc), 0) << hmr_last_error();
  device.free_now();
  FakeAllocation again(0, kAlloc);
  ASSERT_EQ(again.get(), address) << "the fake hands a freed address out first";
  const uint64_t registrations = stats_of(second.get()).nic_registrations;
  EXPECT_NE(reg_key_close(second.get(), again.get(), 8192), key)
      << "STALE HIT: the freed allocation's registration, from the second domain's hint";
  EXPECT_EQ(stats_of(second.get()).nic_registrations, registrations + 1);
}

// While it lives, the fake driver answers BUFFER_ID 0 (cuda.h's "default NULL value").
struct NoBufferIds {
  NoBufferIds() { fake_cuda().set_failure("cuPointerGetAttributes:no_buffer_id", 1); }
  ~NoBufferIds() { fake_cuda().set_failure("cuPointerGetAttributes:no_buffer_id", 0); }
};

// CUDA memory whose BUFFER_ID reads 0 (the fake's pseudo-failure; no driver seen does it) is
// told apart from the next allocation at its address by nothing: it is registered without the
// cache, and a free and an allocation at the address get a registration of their own.
TEST(DeviceHitPath, CudaMemoryWithoutABufferIdIsNotCached) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const NoBufferIds no_buffer_ids;
  FakeAllocation device(0, kAlloc);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), device.get(), 8192, kAccess, 0, 0, 0, &mr, nullptr), 0)
      << hmr_last_error();
  MrPtr owned(mr);
  EXPECT_EQ(mr_info(mr).cached, 0) << "cached with nothing to tell its allocation apart";
  const uint64_t key = hmr_mr_key(mr);
  void* const address = device.get();
  const uint64_t registrations = stats_of(domain.get()).nic_registrations;
  EXPECT_NE(reg_key_close(domain.get(), address, 8192), key);  // its own registration
  owned.reset();
  device.free_now();
  FakeAllocation again(0, kAlloc);
  ASSERT_EQ(again.get(), address) << "the fake hands a freed address out first";
  reg_key_close(domain.get(), again.get(), 8192);
  EXPECT_EQ(stats_of(domain.get()).nic_registrations, registrations + 2);
}

// The same memory's dma-buf export is not shared either: an MR of a freed allocation still
// open keeps its export, and a new allocation at the address and length (the same name with no
// id) was registered against it — the freed allocation's pages (found by a review, for ROCr
// memory whose free hmr cannot hear: DmabufShares.AnAllocationNotToldApartGetsAnExportOfItsOwn).
TEST(DeviceHitPath, CudaMemoryWithoutABufferIdGetsAnExportOfItsOwn) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const NoBufferIds no_buffer_ids;
  auto old_allocation = std::make_unique<FakeAllocation>(0, kAlloc);
  void* const address = old_allocation->get();
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), address, kAlloc, kAccess, 0, 0, 0, &mr, nullptr), 0)
      << hmr_last_error();
  MrPtr old_mr(mr);
  const hmr_mr_info old_info = mr_info(old_mr.get());
  ASSERT_EQ(old_info.path, HMR_MR_PATH_DMABUF);
  old_allocation->free_now();  // the application frees it with its MR still open
  FakeAllocation again(0, kAlloc);
  ASSERT_EQ(again.get(), address) << "the fake hands a freed address out first";
  const int exports = export_calls();
  ASSERT_EQ(hmr_mr_reg(domain.get(), again.get(), kAlloc, kAccess, 0, 0, 0, &mr, nullptr), 0)
      << hmr_last_error();
  MrPtr new_mr(mr);
  EXPECT_EQ(export_calls(), exports + 1) << "STALE: the new allocation used the old one's export";
  struct stat old_buf {}, new_buf {};
  ASSERT_EQ(fstat(old_info.dmabuf_fd, &old_buf), 0);
  ASSERT_EQ(fstat(mr_info(new_mr.get()).dmabuf_fd, &new_buf), 0);
  EXPECT_NE(old_buf.st_ino, new_buf.st_ino) << "STALE: the same dma-buf";
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

// cuMemAllocAsync's pool memory (the fake models the pool: tests/fakes/fake_cuda_pool.c).  A
// pool hands a freed address out again, with its old bytes while it keeps the memory and with
// new memory once it released it (at a synchronisation, by its release threshold, or a trim);
// either way the allocation is a new one with a new BUFFER_ID (cuda.h), so a hit is only ever
// one of the allocation registered, and the hit asks the driver once.
TEST(DeviceHitPath, StreamOrderedPoolMemoryHitsOnlyItsOwnAllocation) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  std::vector<uint64_t> keys;
  const std::array<uint8_t, 4> marker = {1, 2, 3, 4};
  for (const bool released : {false, true}) {
    SCOPED_TRACE(released ? "the pool released the memory" : "the pool kept the memory");
    unsigned long long first = 0;
    ASSERT_EQ(fake_cuda().alloc_pooled(0, kAlloc, &first), 0);
    ASSERT_EQ(fake_cuda().poke(first, marker.data(), marker.size()), 0);
    const uint64_t key = reg_key_close(domain.get(), as_pointer(first), 4096);
    for (const uint64_t old : keys) EXPECT_NE(key, old);
    keys.push_back(key);
    const int calls_before = driver_calls();
    EXPECT_EQ(reg_key_close(domain.get(), as_pointer(first), 4096), key) << "not a hit";
    EXPECT_EQ(driver_calls() - calls_before, 1) << "driver calls per pool-memory hit";
    ASSERT_EQ(fake_cuda().free(first), 0);
    if (released) fake_cuda().release_pools();

    unsigned long long again = 0;
    ASSERT_EQ(fake_cuda().alloc_pooled(0, kAlloc, &again), 0);
    ASSERT_EQ(again, first) << "the pool hands a freed address out first";
    std::array<uint8_t, 4> bytes{};
    ASSERT_EQ(fake_cuda().peek(again, bytes.data(), bytes.size()), 0);
    EXPECT_EQ(bytes == marker, !released) << "the pool's model: kept bytes, or new memory";
    const hmr_domain_stats before = stats_of(domain.get());
    const uint64_t new_key = reg_key_close(domain.get(), as_pointer(again), 4096);
    EXPECT_NE(new_key, key) << "STALE HIT: an earlier pool allocation's registration";
    EXPECT_EQ(stats_of(domain.get()).cache_hits, before.cache_hits);
    EXPECT_EQ(reg_key_close(domain.get(), as_pointer(again), 4096), new_key) << "the new one hits";
    keys.push_back(new_key);
    ASSERT_EQ(fake_cuda().free(again), 0);
  }
}

// Small pool allocations share pages (512-byte placement in the fake, as a real pool may pack
// them): each is its own allocation with its own registration, though the dma-buf each export
// is page-rounded over its neighbour's bytes.
TEST(DeviceHitPath, SmallPoolAllocationsSharingAPageKeepTheirOwnRegistrations) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  std::array<unsigned long long, 3> small{};
  for (auto& address : small) ASSERT_EQ(fake_cuda().alloc_pooled(0, 1000, &address), 0);
  ASSERT_EQ(small[1] / 4096, small[0] / 4096) << "the fake packs small pool allocations";
  std::array<uint64_t, 3> keys{};
  for (size_t i = 0; i < small.size(); ++i) {
    keys[i] = reg_key_close(domain.get(), as_pointer(small[i]), 1000);
    ASSERT_NE(keys[i], HMR_KEY_NOTAVAIL);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(keys[i], keys[j]);
  }
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < small.size(); ++i) {
      EXPECT_EQ(reg_key_close(domain.get(), as_pointer(small[i]), 1000), keys[i]) << i;
    }
  }
  // Bytes of one allocation and of its neighbour together are in no one allocation.
  hmr_mr* across = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), as_pointer(small[0] + 900), small[1] - small[0], kAccess, 0,
                       0, 0, &across, nullptr),
            -HMR_EINVAL);
  EXPECT_NE(std::string(hmr_last_error()).find("not inside one CUDA allocation"),
            std::string::npos)
      << hmr_last_error();
  // The middle one freed and handed out again: the neighbours still hit, it misses.
  ASSERT_EQ(fake_cuda().free(small[1]), 0);
  unsigned long long again = 0;
  ASSERT_EQ(fake_cuda().alloc_pooled(0, 1000, &again), 0);
  ASSERT_EQ(again, small[1]);
  const uint64_t new_key = reg_key_close(domain.get(), as_pointer(again), 1000);
  EXPECT_NE(new_key, keys[1]) << "STALE HIT: the freed neighbour's registration";
  EXPECT_EQ(reg_key_close(domain.get(), as_pointer(small[0]), 1000), keys[0]);
  EXPECT_EQ(reg_key_close(domain.get(), as_pointer(small[2]), 1000), keys[2]);
  small[1] = again;
  for (const auto address : small) EXPECT_EQ(fake_cuda().free(address), 0);
}

// Small cuMemAlloc allocations share 2 MiB chunks and pages (driver 580 packs them; so does the
// fake, for cuMemAlloc: hmr_mem_alloc's path): each hits only its own registration, one driver
// query a hit, and one freed and allocated again in its place misses.
TEST(DeviceHitPath, SmallCuMemAllocsSharingAPageHitOnlyTheirOwnRegistrations) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  std::array<void*, 3> small{};
  for (void*& address : small) {
    ASSERT_EQ(hmr_mem_alloc(HMR_HMEM_CUDA, 0, 1000, HMR_MEM_DEVICE_ONLY, &address), 0)
        << hmr_last_error();
  }
  const auto page_of = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / 4096; };
  ASSERT_EQ(page_of(small[2]), page_of(small[0])) << "the fake packs small cuMemAllocs";
  std::array<uint64_t, 3> keys{};
  for (size_t i = 0; i < small.size(); ++i) {
    keys[i] = reg_key_close(domain.get(), small[i], 1000);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(keys[i], keys[j]);
    // Exported as the one page that holds it (page-rounded), never the shared chunk.
    unsigned long long exported = 0;
    size_t exported_size = 0;
    unsigned long long flags = 0;
    fake_cuda().last_export(&exported, &exported_size, &flags);
    EXPECT_EQ(exported, reinterpret_cast<uintptr_t>(small[i]) / 4096 * 4096) << i;
    EXPECT_EQ(exported_size, 4096u) << i;
  }
  const int calls_before = driver_calls();
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(reg_key_close(domain.get(), small[i], 1000), keys[i]) << i;
  }
  EXPECT_EQ(driver_calls() - calls_before, 3) << "driver calls for three hits";
  ASSERT_EQ(hmr_mem_free(HMR_HMEM_CUDA, small[1]), 0) << hmr_last_error();
  void* again = nullptr;
  ASSERT_EQ(hmr_mem_alloc(HMR_HMEM_CUDA, 0, 1000, HMR_MEM_DEVICE_ONLY, &again), 0);
  ASSERT_EQ(again, small[1]) << "the fake hands a freed place out first";
  EXPECT_NE(reg_key_close(domain.get(), again, 1000), keys[1])
      << "STALE HIT: the freed neighbour's registration";
  EXPECT_EQ(reg_key_close(domain.get(), small[0], 1000), keys[0]);
  EXPECT_EQ(reg_key_close(domain.get(), small[2], 1000), keys[2]);
  small[1] = again;
  for (void* address : small) EXPECT_EQ(hmr_mem_free(HMR_HMEM_CUDA, address), 0);
}

// A child forked from the driver's process cannot use the driver (it answers
// NOT_INITIALIZED), and cannot use its parent's domain (HMR_EBADF): the parent's device
// registration is never the child's answer, through the parent's domain or one of its own.
TEST(DeviceHitPath, AForkedChildNeverGetsTheParentsDeviceRegistration) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const uint64_t key = reg_key_close(domain.get(), device.get(), 4096);
  ASSERT_EQ(reg_key_close(domain.get(), device.get(), 4096), key);
  const int stale = hmr_test::run_forked([&] {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain.get(), device.get(), 4096, kAccess, 0, 0, 0, &mr, nullptr) !=
        -HMR_EBADF) {
      return 2;  // the parent's domain served the child
    }
    auto own = open_child_domain(nullptr);
    if (!own) return 3;
    if (hmr_mr_reg(own.get(), device.get(), 4096, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
      return 0;  // refused: not a stale answer
    }
    hmr_mr_info info{};
    info.size = sizeof info;
    // (The child's domain numbers its keys afresh: the iface is what would say "the parent's".)
    const bool parents = hmr_mr_query(mr, &info) == 0 && info.iface == HMR_HMEM_CUDA;
    hmr_mr_close(mr);
    return parents ? 1 : 0;
  });
  ASSERT_GE(stale, 0) << "the child could not be forked, or died of a signal";
  EXPECT_EQ(stale, 0) << "the child got the parent's cached device registration (1), used the "
                          "parent's domain (2), or could not open one (3)";
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

// Pinned host memory from the driver (cuMemHostAlloc) is reachable from every device, so the
// full path accepts a declaration of any device for it (one staging pool shared by several
// GPUs, as a transport declares it with the GPU of each peer): its hits take the one-pass path
// with one driver call too, declared with the device it was allocated on or another.  (They
// paid the full path when another device was declared.)
TEST(DeviceHitPath, PinnedHostMemoryDeclaredWithAnyDeviceHits) {
  FakeAllocation pinned(0, kAlloc, FAKE_CUDA_MEM_HOST);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr first = register_ok(domain.get(), pinned.get(), 8192, HMR_HMEM_CUDA, 1);
  ASSERT_TRUE(first);
  ASSERT_EQ(mr_info(first.get()).kind, HMR_MEM_HOST_ALLOC);
  ASSERT_EQ(mr_info(first.get()).cached, 1);
  const uint64_t key = hmr_mr_key(first.get());
  first.reset();
  const hmr_domain_stats before = stats_of(domain.get());
  const int calls_before = driver_calls();
  constexpr int kHits = 12;
  for (int i = 0; i < kHits; ++i) {
    hmr_mr* mr = nullptr;
    ASSERT_EQ(register_attr(domain.get(), at(pinned.get(), (i % 4) * 1024), 4096, HMR_HMEM_CUDA,
                            i % 2, 0, &mr),
              0)
        << hmr_last_error();
    EXPECT_EQ(hmr_mr_key(mr), key);
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
  EXPECT_EQ(driver_calls() - calls_before, kHits) << "driver calls per hit of pinned host memory";
  const hmr_domain_stats after = stats_of(domain.get());
  EXPECT_EQ(after.cache_hits, before.cache_hits + kHits);
  EXPECT_EQ(after.nic_registrations, before.nic_registrations);
  // Device memory declared with another device is still refused, hit or not.
  FakeAllocation device(0, kAlloc);
  MrPtr cached = register_ok(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0);
  ASSERT_TRUE(cached);
  hmr_mr* wrong = nullptr;
  EXPECT_EQ(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 1, 0, &wrong),
            -HMR_EINVAL);
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

// CUDA IPC: device memory another process exported (cuIpcGetMemHandle) and this one mapped
// (cuIpcOpenMemHandle), as NCCL's and vLLM's peers share buffers.  Its hits cost one driver
// call like any device hit; once the import is closed and the exporter freed and exported
// again, the new import, mapped at the same address, never hits the old one's registration.
// The fake's IPC (tests/fakes/fake_cuda_ipc.c) is checked on the way: the bytes are the
// exporter's, a second open of a handle is the same mapping, cuMemFree refuses imported
// memory, a stale handle and a handle opened by its own exporter are refused.
class FakeIpc {
 public:
  using Handle = std::array<char, 64>;
  FakeIpc() {
    // The object hmr loads (HMR_CUDA_LIBRARY); its driver calls, as an application makes them.
    const hmr::testing::FakeLibrary library("fake CUDA driver", HMR_FAKE_CUDA_PATH);
    release_ = library.function<int (*)(int)>("cuDevicePrimaryCtxRelease_v2");
    set_current_ = library.function<int (*)(void*)>("cuCtxSetCurrent");
    get_handle_ = library.function<int (*)(Bytes*, unsigned long long)>("cuIpcGetMemHandle");
    open_ = library.function<int (*)(unsigned long long*, Bytes, unsigned)>(
        "cuIpcOpenMemHandle_v2");
    close_ = library.function<int (*)(unsigned long long)>("cuIpcCloseMemHandle");
    free_ = library.function<int (*)(unsigned long long)>("cuMemFree_v2");
    auto init = library.function<int (*)(unsigned)>("cuInit");
    auto retain = library.function<int (*)(void**, int)>("cuDevicePrimaryCtxRetain");
    void* context = nullptr;
    ready_ = init(0) == 0 && retain(&context, 0) == 0 && set_current_(context) == 0;
  }
  ~FakeIpc() {
    if (ready_) {
      set_current_(nullptr);
      release_(0);
    }
  }
  bool ready() const { return ready_; }
  // An open import, closed however the test leaves (an ASSERT returns early).
  struct Import {
    FakeIpc& ipc;
    unsigned long long address = 0;
    ~Import() {
      if (address != 0) ipc.close(address);
    }
    int close_now() {
      const int rc = ipc.close(address);
      address = 0;
      return rc;
    }
  };
  int open(const Handle& handle, unsigned long long* out) {
    Bytes bytes;
    std::memcpy(bytes.data, handle.data(), sizeof bytes.data);
    return open_(out, bytes, 1);
  }
  int close(unsigned long long address) { return close_(address); }
  int free(unsigned long long address) { return free_(address); }
  int handle_of(unsigned long long address, Handle* out) {
    Bytes bytes;
    const int rc = get_handle_(&bytes, address);
    std::memcpy(out->data(), bytes.data, out->size());
    return rc;
  }

 private:
  struct Bytes {
    char data[64];
  };
  bool ready_ = false;
  int (*release_)(int) = nullptr;
  int (*set_current_)(void*) = nullptr;
  int (*get_handle_)(Bytes*, unsigned long long) = nullptr;
  int (*open_)(unsigned long long*, Bytes, unsigned) = nullptr;
  int (*close_)(unsigned long long) = nullptr;
  int (*free_)(unsigned long long) = nullptr;
};

TEST(DeviceHitPath, IpcImportedMemoryNeverHitsAnEarlierImportsRegistration) {
  FakeIpc ipc;
  ASSERT_TRUE(ipc.ready());
  std::string why;
  auto exporter =
      hmr::testing::IpcExporter::start(HMR_CUDA_IPC_EXPORTER_PATH, HMR_FAKE_CUDA_PATH, &why);
  ASSERT_TRUE(exporter) << why;
  auto first = exporter->allocate(kAlloc, 0x11, &why);
  ASSERT_TRUE(first) << why;
  FakeIpc::Import first_import{ipc};
  ASSERT_EQ(ipc.open(first->handle, &first_import.address), 0);
  const unsigned long long imported = first_import.address;
  uint8_t byte = 0;
  ASSERT_EQ(fake_cuda().peek(imported + 100, &byte, 1), 0);
  EXPECT_EQ(byte, 0x11) << "not the exporter's bytes";
  FakeIpc::Import twice{ipc};
  EXPECT_EQ(ipc.open(first->handle, &twice.address), 0);
  EXPECT_EQ(twice.address, imported) << "a second open of a handle is the same mapping (cuda.h)";
  EXPECT_EQ(twice.close_now(), 0);
  EXPECT_EQ(ipc.free(imported), 1) << "cuMemFree of imported memory (INVALID_VALUE expected)";

  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const uint64_t key = reg_key_close(domain.get(), as_pointer(imported), 8192);  // the miss
  const int calls_before = driver_calls();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(reg_key_close(domain.get(), as_pointer(imported + (i % 4) * 1024), 4096), key);
  }
  EXPECT_EQ(driver_calls() - calls_before, 10) << "driver calls per hit of imported memory";

  // The importer lets go, the exporter frees and exports a new allocation.
  ASSERT_EQ(first_import.close_now(), 0);
  ASSERT_TRUE(exporter->free(&why)) << why;
  auto second = exporter->allocate(kAlloc, 0x22, &why);
  ASSERT_TRUE(second) << why;
  unsigned long long stale = 0;
  EXPECT_EQ(ipc.open(first->handle, &stale), 1) << "the freed allocation's handle opened";
  FakeIpc::Import second_import{ipc};
  ASSERT_EQ(ipc.open(second->handle, &second_import.address), 0);
  const unsigned long long again = second_import.address;
  ASSERT_EQ(again, imported) << "the fake maps the new import where the old one was";
  const hmr_domain_stats before = stats_of(domain.get());
  const uint64_t new_key = reg_key_close(domain.get(), as_pointer(again), 4096);
  EXPECT_NE(new_key, key) << "STALE HIT: the earlier import's registration";
  EXPECT_EQ(stats_of(domain.get()).cache_hits, before.cache_hits);
  EXPECT_EQ(reg_key_close(domain.get(), as_pointer(again), 4096), new_key) << "the new one hits";
  ASSERT_EQ(fake_cuda().peek(again + 100, &byte, 1), 0);
  EXPECT_EQ(byte, 0x22);
  domain.reset();
  EXPECT_EQ(second_import.close_now(), 0);
  EXPECT_EQ(ipc.close(again), 1) << "a closed import closed again";

  // This process's own allocation: exportable, but not openable here.
  FakeAllocation own(0, kAlloc);
  FakeIpc::Handle handle;
  ASSERT_EQ(ipc.handle_of(own.address(), &handle), 0);
  unsigned long long self = 0;
  EXPECT_EQ(ipc.open(handle, &self), 201) << "a handle opened by its own exporter";
  EXPECT_EQ(ipc.handle_of(own.address() + 4096, &handle), 1) << "a handle of a non-base address";
}

}  // namespace
}  // namespace hmr_hmem_test
