// The device hit path (core/hit_path.cpp) against the real driver, through the public API:
// issue 26's "never stale" list on a GPU.  hmr_mr_reg detects the memory (nothing declared),
// a repeated registration is a cache hit answered by one driver query (BUFFER_ID), and a
// registration never names memory that is gone: cuMemFree and cuMemAlloc at the same
// address, a VMM segment unmapped and mapped again with new physical memory, stream-ordered
// pool memory freed, trimmed and handed out again, memory imported from another process
// (CUDA IPC) and imported again after the exporter freed it, a forked child, threads hitting
// while another frees, and HMR_CUDA_FREES_REPORTED (hits from hints, no driver query) with
// the frees reported.  The call counts are asserted on the fake driver
// (tests/hmem_api/device_hit_path_test.cpp); a real driver counts nothing, so here the cache's
// statistics say hit or miss and the keys say whose registration it was.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/test_support.h"
#include "tests/gpu/gpu_lane.h"
#include "tests/gpu/ipc_exporter.h"
#include "tests/gpu/vmm_allocation.h"

namespace hmr::cuda {
namespace {

using hmr::testing::as_device_pointer;
using hmr::testing::CudaGpuLane;
using hmr::testing::VmmAllocation;

constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr size_t kAlloc = 2 << 20;

using hmr_test::domain_stats;

// hmr_mr_reg + hmr_mr_key + hmr_mr_close, as a transport registers a buffer it was handed;
// HMR_KEY_NOTAVAIL when the registration failed.
uint64_t reg_key_close(hmr_domain* domain, CUdeviceptr address, size_t len) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, as_device_pointer(address), len, kAccess, 0, 0, 0, &mr,
                            nullptr);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  if (rc != 0) return HMR_KEY_NOTAVAIL;
  const uint64_t key = hmr_mr_key(mr);
  EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  return key;
}

// Tests on the sim NIC, which records a device registration's dma-buf and never touches it;
// skipped where device 0 exports no dma-buf.
class CudaHitPath : public CudaGpuLane {
 protected:
  void SetUp() override {
    CudaGpuLane::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Result<hmem::DeviceCapabilities> caps = iface().capabilities(hmem::DeviceId{0});
    ASSERT_TRUE(caps.ok()) << caps.status().reason();
    if (!caps->dmabuf.supported) GTEST_SKIP() << "device 0: " << caps->dmabuf.reason;
  }

  static hmr_test::DomainPtr open_domain() {
    return hmr_test::open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL);
  }

  // An allocation of kAlloc bytes, after `previous` was freed: whether the driver handed the
  // same address out again (what the staleness checks need; printed when it did not).
  bool allocate_again(CUdeviceptr previous, CUdeviceptr* again) {
    if (driver().cuMemAlloc(again, kAlloc) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuMemAlloc";
      return false;
    }
    if (*again == previous) return true;
    std::printf("note: the driver did not hand 0x%llx out again (got 0x%llx)\n", previous, *again);
    return false;
  }
};

TEST_F(CudaHitPath, RepeatedRegistrationsOfDetectedCudaMemoryAreHitsThatReachNoNic) {
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&memory, kAlloc));
  const uint64_t key = reg_key_close(domain.get(), memory, 65536);  // the miss
  const hmr_domain_stats before = domain_stats(domain.get());
  constexpr int kHits = 1000;
  for (int i = 0; i < kHits; ++i) {
    // Ranges inside the registered one, as a transport's slices of a buffer.
    ASSERT_EQ(reg_key_close(domain.get(), memory + (i % 4) * 4096, 4096), key) << i;
  }
  const hmr_domain_stats after = domain_stats(domain.get());
  EXPECT_EQ(after.cache_hits, before.cache_hits + kHits);
  EXPECT_EQ(after.nic_registrations, before.nic_registrations);
  EXPECT_EQ(after.mr_open, 0u);

  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), as_device_pointer(memory), 4096, kAccess, 0, 0, 0, &mr,
                       nullptr),
            0)
      << hmr_last_error();
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  ASSERT_EQ(hmr_mr_query(mr, &info), 0) << hmr_last_error();
  EXPECT_EQ(info.iface, HMR_HMEM_CUDA);
  EXPECT_EQ(info.kind, HMR_MEM_DEVICE_ONLY);
  EXPECT_EQ(info.cached, 1);
  EXPECT_EQ(info.path, HMR_MR_PATH_DMABUF);
  EXPECT_EQ(hmr_mr_close(mr), 0);
  domain.reset();
  HMR_CU_ASSERT(driver().cuMemFree(memory));
}

TEST_F(CudaHitPath, FreeAndAllocationAtTheSameAddressNeverHitsTheOldRegistration) {
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  int checked = 0;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    CUdeviceptr memory = 0;
    HMR_CU_ASSERT(driver().cuMemAlloc(&memory, kAlloc));
    const uint64_t key = reg_key_close(domain.get(), memory, 4096);
    EXPECT_EQ(reg_key_close(domain.get(), memory, 4096), key) << "not a hit";
    HMR_CU_ASSERT(driver().cuMemFree(memory));
    CUdeviceptr again = 0;
    const bool same = allocate_again(memory, &again);
    if (same) {
      ++checked;
      const hmr_domain_stats before = domain_stats(domain.get());
      const uint64_t new_key = reg_key_close(domain.get(), again, 4096);
      const hmr_domain_stats after = domain_stats(domain.get());
      EXPECT_NE(new_key, key) << "STALE HIT: the freed allocation's registration";
      EXPECT_EQ(after.cache_hits, before.cache_hits);
      EXPECT_EQ(after.cache_misses, before.cache_misses + 1);
      EXPECT_EQ(reg_key_close(domain.get(), again, 4096), new_key) << "the new one hits";
    }
    HMR_CU_ASSERT(driver().cuMemFree(again));
  }
  if (checked == 0) GTEST_SKIP() << "the driver never handed a freed address out again";
}

// A VMM segment unmapped and mapped again with new physical memory at the same address
// (PyTorch's expandable segments shrink and grow this way): the old mapping's registration,
// whose dma-buf still holds the old pages, is never the answer.
TEST_F(CudaHitPath, AVmmSegmentMappedAgainNeverHitsTheOldMappingsRegistration) {
  bool rdma = false;
  if (!vmm_supported(0, &rdma)) GTEST_SKIP() << "device 0 has no VMM support";
  if (!rdma) GTEST_SKIP() << "device 0's VMM memory cannot be GPUDirect RDMA capable";
  Result<VmmAllocation> created = VmmAllocation::create(driver(), 0, 1, 1, 1, rdma);
  ASSERT_TRUE(created.ok()) << created.status().reason();
  VmmAllocation& memory = *created;
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  const uint64_t key = reg_key_close(domain.get(), memory.base(), 8192);
  EXPECT_EQ(reg_key_close(domain.get(), memory.base(), 8192), key) << "not a hit";
  ASSERT_TRUE(memory.unmap_segment(0).ok());
  ASSERT_TRUE(memory.map_segment(0).ok());
  const hmr_domain_stats before = domain_stats(domain.get());
  const uint64_t new_key = reg_key_close(domain.get(), memory.base(), 8192);
  const hmr_domain_stats after = domain_stats(domain.get());
  EXPECT_NE(new_key, key) << "STALE HIT: the unmapped segment's registration";
  EXPECT_EQ(after.cache_hits, before.cache_hits);
  EXPECT_EQ(reg_key_close(domain.get(), memory.base(), 8192), new_key) << "the new one hits";
}

// PyTorch's expandable segments hand out a buffer inside segment 0 and one across segments 0
// and 1 of one reservation: two views with the same base.  Registered in turn, each is
// registered once and then found in the cache (the device monitor took each for a free of the
// other: every registration was a miss with a new export, ~35-50 us on the H100); a remap of
// segment 1 then drops the view across it, and never serves its old registration.
TEST_F(CudaHitPath, TwoViewsOfOneReservationRegisteredInTurnAreEachRegisteredOnce) {
  bool rdma = false;
  if (!vmm_supported(0, &rdma)) GTEST_SKIP() << "device 0 has no VMM support";
  if (!rdma) GTEST_SKIP() << "device 0's VMM memory cannot be GPUDirect RDMA capable";
  Result<VmmAllocation> created = VmmAllocation::create(driver(), 0, 2, 1, 1, rdma);
  ASSERT_TRUE(created.ok()) << created.status().reason();
  VmmAllocation& memory = *created;
  const CUdeviceptr across = memory.base() + memory.segment_size() - 8192;
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  const uint64_t inside_key = reg_key_close(domain.get(), memory.base(), 8192);
  const uint64_t across_key = reg_key_close(domain.get(), across, 16384);
  const hmr_domain_stats before = domain_stats(domain.get());
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(reg_key_close(domain.get(), memory.base(), 8192), inside_key) << round;
    EXPECT_EQ(reg_key_close(domain.get(), across, 16384), across_key) << round;
  }
  const hmr_domain_stats after = domain_stats(domain.get());
  EXPECT_EQ(after.cache_misses, before.cache_misses) << "the views dropped each other";
  EXPECT_EQ(after.nic_registrations, before.nic_registrations);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 2 * kRounds);

  ASSERT_TRUE(memory.unmap_segment(1).ok());
  ASSERT_TRUE(memory.map_segment(1).ok());
  EXPECT_NE(reg_key_close(domain.get(), across, 16384), across_key)
      << "STALE HIT: the view across the remapped segment";
  EXPECT_NE(reg_key_close(domain.get(), memory.base(), 8192), HMR_KEY_NOTAVAIL);
}


// Stream-ordered pool memory (cuMemAllocAsync: PyTorch's cudaMallocAsync backend).  A pool
// keeps freed memory only up to its release threshold: above it, "the allocator will try to
// release memory back to the OS on the next call to stream, event or context synchronize"
// (cuda.h; the default threshold is 0).  So an address handed out again has its old physical
// memory only while the pool kept it — a hit is then not stale either way (printed: whether
// the driver gave the new allocation a new BUFFER_ID, as cuda.h says every allocation gets) —
// and new memory after a free and a synchronisation under the default threshold, or after
// cuMemPoolTrimTo: then the old registration must never be the answer.
TEST_F(CudaHitPath, PoolMemoryReleasedAndHandedOutAgainNeverHitsTheOldRegistration) {
  const std::optional<hmr::testing::PoolCalls> calls = hmr::testing::pool_calls();
  if (HasFailure()) return;
  if (!calls) GTEST_SKIP() << "the driver has no stream-ordered allocator";
  void* pool = nullptr;
  HMR_CU_ASSERT(calls->default_pool(&pool, 0));
  uint64_t threshold_before = 0;
  HMR_CU_ASSERT(calls->get_attribute(pool, hmr::testing::kPoolReleaseThreshold, &threshold_before));
  auto set_threshold = [&](uint64_t bytes) {
    HMR_CU_ASSERT(calls->set_attribute(pool, hmr::testing::kPoolReleaseThreshold, &bytes));
  };
  // The pool as the test found it, however the test ends (later tests use it too).
  struct Restore {
    const hmr::testing::PoolCalls& calls;
    void* pool;
    uint64_t threshold;
    ~Restore() {
      (void)calls.set_attribute(pool, hmr::testing::kPoolReleaseThreshold, &threshold);
      (void)calls.trim_to(pool, 0);
    }
  } restore{*calls, pool, threshold_before};
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  auto allocate = [&](CUdeviceptr* memory) {
    HMR_CU_ASSERT(calls->alloc_async(memory, kAlloc, nullptr));
    HMR_CU_ASSERT(calls->synchronize(nullptr));
  };
  auto release = [&](CUdeviceptr memory) {
    HMR_CU_ASSERT(calls->free_async(memory, nullptr));
    HMR_CU_ASSERT(calls->synchronize(nullptr));
  };
  // A miss (and no hit) for memory at `address` that is not the registration's any more.
  auto expect_fresh = [&](CUdeviceptr address, const std::vector<uint64_t>& old_keys,
                          const char* how) {
    const hmr_domain_stats before = domain_stats(domain.get());
    const uint64_t fresh_key = reg_key_close(domain.get(), address, 4096);
    for (const uint64_t old : old_keys) {
      EXPECT_NE(fresh_key, old) << "STALE HIT: pool memory " << how;
    }
    EXPECT_EQ(domain_stats(domain.get()).cache_hits, before.cache_hits) << how;
    return fresh_key;
  };

  // 1. The pool keeps what is freed (threshold: everything).
  ASSERT_NO_FATAL_FAILURE(set_threshold(UINT64_MAX));
  CUdeviceptr first = 0;
  ASSERT_NO_FATAL_FAILURE(allocate(&first));
  const uint64_t key = reg_key_close(domain.get(), first, 4096);
  EXPECT_EQ(reg_key_close(domain.get(), first, 4096), key) << "not a hit";
  ASSERT_NO_FATAL_FAILURE(release(first));
  CUdeviceptr reused = 0;
  ASSERT_NO_FATAL_FAILURE(allocate(&reused));
  const hmr_domain_stats before_reuse = domain_stats(domain.get());
  const uint64_t reused_key = reg_key_close(domain.get(), reused, 4096);
  const bool reuse_hit = domain_stats(domain.get()).cache_hits > before_reuse.cache_hits;
  std::printf("pool memory kept and handed out again %s: %s\n",
              reused == first ? "at the same address" : "elsewhere",
              reuse_hit ? "a hit (the driver kept its BUFFER_ID)"
                        : "a miss (a new BUFFER_ID)");
  EXPECT_EQ(reuse_hit, reused_key == key);
  std::vector<uint64_t> keys = {key, reused_key};

  // Where a registration was made: an allocation there after a release must miss.
  auto registered_at = [&](CUdeviceptr address) { return address == first || address == reused; };

  // 2. Freed and synchronised under the default threshold (0): released, new memory.
  ASSERT_NO_FATAL_FAILURE(set_threshold(0));
  ASSERT_NO_FATAL_FAILURE(release(reused));
  CUdeviceptr after_sync = 0;
  ASSERT_NO_FATAL_FAILURE(allocate(&after_sync));
  bool checked = false;
  if (registered_at(after_sync)) {
    keys.push_back(expect_fresh(after_sync, keys, "released at a synchronisation"));
    checked = true;
  }

  // 3. Kept by the threshold, then trimmed (cuMemPoolTrimTo): new memory.
  ASSERT_NO_FATAL_FAILURE(set_threshold(UINT64_MAX));
  ASSERT_NO_FATAL_FAILURE(release(after_sync));
  HMR_CU_ASSERT(calls->trim_to(pool, 0));
  CUdeviceptr after_trim = 0;
  ASSERT_NO_FATAL_FAILURE(allocate(&after_trim));
  if (registered_at(after_trim)) {
    expect_fresh(after_trim, keys, "trimmed");
    checked = true;
  }
  ASSERT_NO_FATAL_FAILURE(release(after_trim));
  if (!checked) {
    GTEST_SKIP() << "after each release the pool handed out another address; the stale-hit "
                    "checks did not run";
  }
}

// A child forked from a process that uses the driver cannot use it (CUDA's rule: the driver
// answers CUDA_ERROR_NOT_INITIALIZED there), nor its parent's domain (HMR_EBADF): the
// parent's device registration is never the child's answer, through the parent's domain or
// one the child opens, and nothing hangs.
TEST_F(CudaHitPath, AForkedChildNeverGetsTheParentsDeviceRegistration) {
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&memory, kAlloc));
  const uint64_t key = reg_key_close(domain.get(), memory, 4096);
  ASSERT_EQ(reg_key_close(domain.get(), memory, 4096), key);
  hmr_domain* const inherited = domain.get();
  const int stale = hmr_test::run_forked([&] {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(inherited, as_device_pointer(memory), 4096, kAccess, 0, 0, 0, &mr,
                   nullptr) != -HMR_EBADF) {
      return 2;  // the parent's domain served the child
    }
    auto own = open_domain();
    if (!own) return 3;
    if (hmr_mr_reg(own.get(), as_device_pointer(memory), 4096, kAccess, 0, 0, 0, &mr,
                   nullptr) != 0) {
      std::printf("in the forked child: %s\n", hmr_last_error());
      return 0;  // refused, with a reason: not a stale answer
    }
    // A domain of the child's own numbers its keys afresh, so a key equal to the parent's
    // says nothing there: the parent's registration would be CUDA memory's.
    hmr_mr_info info{};
    info.size = sizeof info;
    const bool parents = hmr_mr_query(mr, &info) == 0 && info.iface == HMR_HMEM_CUDA;
    hmr_mr_close(mr);
    return parents ? 1 : 0;
  });
  EXPECT_EQ(stale, 0) << (stale < 0 ? "the child died of a signal (or its 20 s alarm)"
                                    : "the child got the parent's cached device registration "
                                      "(1), used the parent's domain (2) or opened none (3)");
  domain.reset();
  HMR_CU_ASSERT(driver().cuMemFree(memory));
}

// Three threads hit one allocation while this one allocates, registers, hits and frees
// allocation after allocation (the driver hands freed addresses out again): every key anyone
// got was the registration of the allocation it asked about.
TEST_F(CudaHitPath, ThreadsHitWhileAnotherFreesAndAllocatesAgain) {
  auto domain = open_domain();
  ASSERT_TRUE(domain);
  CUdeviceptr stable = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&stable, kAlloc));
  const uint64_t stable_key = reg_key_close(domain.get(), stable, 4096);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> hitters;
  // Stopped and joined however the test leaves (an ASSERT returns early).
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (std::thread& thread : threads) {
        if (thread.joinable()) thread.join();
      }
    }
  } joiner{stop, hitters};
  for (int t = 0; t < 3; ++t) {
    hitters.emplace_back([&] {
      // (no current context: hmr's queries do not need one)
      while (!stop.load(std::memory_order_relaxed)) {
        hmr_mr* mr = nullptr;
        if (hmr_mr_reg(domain.get(), as_device_pointer(stable), 4096, kAccess, 0, 0, 0, &mr,
                       nullptr) != 0 ||
            hmr_mr_key(mr) != stable_key) {
          wrong.fetch_add(1);
        }
        if (mr != nullptr) hmr_mr_close(mr);
      }
    });
  }
  int stale = 0;
  uint64_t last_key = HMR_KEY_NOTAVAIL;
  CUdeviceptr last = 0;
  for (int round = 0; round < 50; ++round) {
    CUdeviceptr churn = 0;
    HMR_CU_ASSERT(driver().cuMemAlloc(&churn, kAlloc));
    const uint64_t key = reg_key_close(domain.get(), churn, 4096);
    if (churn == last && key == last_key) ++stale;
    for (int i = 0; i < 3; ++i) {
      if (reg_key_close(domain.get(), churn, 4096) != key) ++stale;
    }
    HMR_CU_ASSERT(driver().cuMemFree(churn));
    last = churn;
    last_key = key;
  }
  stop = true;
  for (std::thread& hitter : hitters) hitter.join();
  EXPECT_EQ(stale, 0) << "registrations of freed allocations handed out";
  EXPECT_EQ(wrong.load(), 0) << "hits on the stable allocation answered wrong";
  EXPECT_EQ(domain_stats(domain.get()).mr_open, 0u);
  domain.reset();
  HMR_CU_ASSERT(driver().cuMemFree(stable));
}

// HMR_CUDA_FREES_REPORTED=1: the application promises to report every free of CUDA memory it
// registered (here hmr_mem_invalidate before cuMemFree), and hits are served from per-thread
// hints without a driver query.  A reported free and an allocation at the same address must
// still miss, and the new allocation's hits must be its own.
TEST_F(CudaHitPath, WithFreesReportedAReportedFreeAndAllocationAtTheSameAddressMisses) {
  setenv("HMR_CUDA_FREES_REPORTED", "1", 1);
  auto domain = open_domain();
  unsetenv("HMR_CUDA_FREES_REPORTED");  // read at the domain's open
  ASSERT_TRUE(domain);
  int checked = 0;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    CUdeviceptr memory = 0;
    HMR_CU_ASSERT(driver().cuMemAlloc(&memory, kAlloc));
    const uint64_t key = reg_key_close(domain.get(), memory, 8192);
    const hmr_domain_stats before = domain_stats(domain.get());
    for (int i = 0; i < 100; ++i) {
      ASSERT_EQ(reg_key_close(domain.get(), memory + (i % 4) * 1024, 4096), key) << i;
    }
    EXPECT_EQ(domain_stats(domain.get()).cache_hits, before.cache_hits + 100);
    ASSERT_EQ(hmr_mem_invalidate(domain.get(), as_device_pointer(memory), kAlloc), 0)
        << hmr_last_error();
    HMR_CU_ASSERT(driver().cuMemFree(memory));
    CUdeviceptr again = 0;
    if (allocate_again(memory, &again)) {
      ++checked;
      const uint64_t new_key = reg_key_close(domain.get(), again, 8192);
      EXPECT_NE(new_key, key) << "STALE HIT: the freed allocation's registration";
      EXPECT_EQ(reg_key_close(domain.get(), again, 4096), new_key) << "the new one hits";
    }
    ASSERT_EQ(hmr_mem_invalidate(domain.get(), as_device_pointer(again), kAlloc), 0);
    HMR_CU_ASSERT(driver().cuMemFree(again));
  }
  if (checked == 0) GTEST_SKIP() << "the driver never handed a freed address out again";
}

// tests/gpu/cuda_ipc_exporter.c: beside this binary (the bundle carries both), else where the
// build put it.
std::string exporter_program() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside(self, static_cast<size_t>(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + "hmr_cuda_ipc_exporter";
    if (access(beside.c_str(), X_OK) == 0) return beside;
  }
  return HMR_CUDA_IPC_EXPORTER_PATH;
}

// The driver's CUDA IPC calls, where it has them.
struct IpcHandle {
  char bytes[64];
};
struct IpcCalls {
  CUresult (*open)(CUdeviceptr*, IpcHandle, unsigned) = nullptr;
  CUresult (*close)(CUdeviceptr) = nullptr;
};
std::optional<IpcCalls> ipc_calls() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return std::nullopt;
  IpcCalls calls;
  calls.open = reinterpret_cast<decltype(calls.open)>(dlsym(library, "cuIpcOpenMemHandle_v2"));
  calls.close = reinterpret_cast<decltype(calls.close)>(dlsym(library, "cuIpcCloseMemHandle"));
  dlclose(library);  // (NOLOAD: hmr and the lane keep it loaded)
  if (calls.open == nullptr || calls.close == nullptr) return std::nullopt;
  return calls;
}

// An open import of another process's export, closed however the test leaves.
struct Import {
  const IpcCalls& calls;
  CUdeviceptr address = 0;
  ~Import() {
    if (address != 0) calls.close(address);
  }
  CUresult open(const hmr::testing::IpcExporter::Export& exported) {
    IpcHandle handle;
    std::memcpy(handle.bytes, exported.handle.data(), sizeof handle.bytes);
    return calls.open(&address, handle, 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
  }
  CUresult close_now() {
    const CUresult result = calls.close(address);
    address = 0;
    return result;
  }
};

// The key of a first registration of 8 KiB of an import (then closed), or nothing with the
// reason in `why`: a NIC or driver that cannot register imported memory is a skip, not a
// failure, of the stale-hit checks.
std::optional<uint64_t> register_import(hmr_domain* domain, CUdeviceptr address,
                                        std::string* why) {
  hmr_mr* mr = nullptr;
  if (hmr_mr_reg(domain, as_device_pointer(address), 8192, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
    *why = std::string("IPC-imported memory could not be registered: ") + hmr_last_error();
    return std::nullopt;
  }
  const uint64_t key = hmr_mr_key(mr);
  EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  return key;
}

// CU_POINTER_ATTRIBUTE_BUFFER_ID of `address` (0 when the driver does not answer).
unsigned long long buffer_id_of(const CudaSymbols& driver, CUdeviceptr address) {
  unsigned long long id = 0;
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_BUFFER_ID;
  void* data[] = {&id};
  if (driver.cuPointerGetAttributes(1, &attribute, data, address) != CUDA_SUCCESS) return 0;
  return id;
}

// CUDA IPC: another process's allocation mapped here (cuIpcOpenMemHandle), as NCCL's and vLLM's
// peers share buffers.  Cached hits while the import is open; after it is closed and the
// exporter freed and exported a new allocation, the new import (usually at the same address)
// never hits the old one's registration.  Also printed: what the driver answers when the
// exporting process opens its own handle (the fake driver assumes INVALID_CONTEXT, 201).
TEST_F(CudaHitPath, IpcImportedMemoryNeverHitsAnEarlierImportsRegistration) {
  const std::optional<IpcCalls> ipc = ipc_calls();
  if (!ipc) GTEST_SKIP() << "the driver has no CUDA IPC";
  std::string why;
  auto exporter = hmr::testing::IpcExporter::start(exporter_program(), "", &why);
  ASSERT_TRUE(exporter) << why;
  auto first = exporter->allocate(kAlloc, 0x11, &why);
  ASSERT_TRUE(first) << why;
  Import first_import{*ipc};
  HMR_CU_ASSERT(first_import.open(*first));
  const CUdeviceptr imported = first_import.address;
  uint8_t byte = 0;
  HMR_CU_ASSERT(driver().cuMemcpyDtoH(&byte, imported + 100, 1));
  EXPECT_EQ(byte, 0x11) << "not the exporter's bytes";

  auto domain = open_domain();
  ASSERT_TRUE(domain);
  const std::optional<uint64_t> registered = register_import(domain.get(), imported, &why);
  if (!registered) {
    domain.reset();
    GTEST_SKIP() << why;
  }
  const uint64_t key = *registered;
  const hmr_domain_stats before_hits = domain_stats(domain.get());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(reg_key_close(domain.get(), imported + (i % 4) * 1024, 4096), key) << i;
  }
  EXPECT_EQ(domain_stats(domain.get()).cache_hits, before_hits.cache_hits + 10);

  HMR_CU_ASSERT(first_import.close_now());
  ASSERT_TRUE(exporter->free(&why)) << why;
  auto second = exporter->allocate(kAlloc, 0x22, &why);
  ASSERT_TRUE(second) << why;
  Import second_import{*ipc};
  HMR_CU_ASSERT(second_import.open(*second));
  const CUdeviceptr again = second_import.address;
  const bool same_address = again == imported;
  if (same_address) {
    const hmr_domain_stats before = domain_stats(domain.get());
    const uint64_t new_key = reg_key_close(domain.get(), again, 8192);
    EXPECT_NE(new_key, key) << "STALE HIT: the earlier import's registration";
    EXPECT_EQ(domain_stats(domain.get()).cache_hits, before.cache_hits);
    EXPECT_EQ(reg_key_close(domain.get(), again, 4096), new_key) << "the new one hits";
  }
  HMR_CU_ASSERT(driver().cuMemcpyDtoH(&byte, again + 100, 1));
  EXPECT_EQ(byte, 0x22);
  domain.reset();
  HMR_CU_ASSERT(second_import.close_now());
  std::optional<int> self_open = exporter->open_in_exporter(&why);
  ASSERT_TRUE(self_open) << why;
  std::printf("the exporting process opening its own IPC handle: CUresult %d\n", *self_open);
  EXPECT_NE(*self_open, 0);
  if (!same_address) {
    GTEST_SKIP() << "the second import is at 0x" << std::hex << again << ", the first was at 0x"
                 << imported << ": the stale-hit check did not run";
  }
}

// Two exporting processes (NCCL peers, vLLM workers), whose allocations are imported in turn,
// usually at one address: the second import never hits the first's registration.  Each
// process numbers its allocations alike, so were an import's BUFFER_ID the exporter's own
// (the fake driver assumes an id of the importer's, tests/fakes/fake_cuda_ipc.c), both
// imports would carry the same id and the second would be served the first's registration.
// The ids are printed: what the driver answers is the fact this records.
TEST_F(CudaHitPath, ImportsFromTwoExportersAtOneAddressNeverShareARegistration) {
  const std::optional<IpcCalls> ipc = ipc_calls();
  if (!ipc) GTEST_SKIP() << "the driver has no CUDA IPC";
  std::string why;
  auto exporter_a = hmr::testing::IpcExporter::start(exporter_program(), "", &why);
  ASSERT_TRUE(exporter_a) << why;
  auto exporter_b = hmr::testing::IpcExporter::start(exporter_program(), "", &why);
  ASSERT_TRUE(exporter_b) << why;
  auto from_a = exporter_a->allocate(kAlloc, 0x33, &why);
  ASSERT_TRUE(from_a) << why;
  auto from_b = exporter_b->allocate(kAlloc, 0x44, &why);
  ASSERT_TRUE(from_b) << why;

  auto domain = open_domain();
  ASSERT_TRUE(domain);
  Import a{*ipc};
  HMR_CU_ASSERT(a.open(*from_a));
  const CUdeviceptr first = a.address;
  const unsigned long long id_a = buffer_id_of(driver(), first);
  const std::optional<uint64_t> registered = register_import(domain.get(), first, &why);
  if (!registered) {
    domain.reset();
    GTEST_SKIP() << why;
  }
  const uint64_t key = *registered;
  EXPECT_EQ(reg_key_close(domain.get(), first, 4096), key) << "a repeated registration hits";
  HMR_CU_ASSERT(a.close_now());

  Import b{*ipc};
  HMR_CU_ASSERT(b.open(*from_b));
  const unsigned long long id_b = buffer_id_of(driver(), b.address);
  std::printf("BUFFER_ID of the import from exporter A: %llu, from exporter B: %llu (%s "
              "address); the allocations in the exporters: A 0x%llx, B 0x%llx\n",
              id_a, id_b, b.address == first ? "same" : "another",
              static_cast<unsigned long long>(from_a->address),
              static_cast<unsigned long long>(from_b->address));
  uint8_t byte = 0;
  HMR_CU_ASSERT(driver().cuMemcpyDtoH(&byte, b.address + 100, 1));
  EXPECT_EQ(byte, 0x44) << "not exporter B's bytes";
  if (b.address != first) {
    domain.reset();
    GTEST_SKIP() << "the second import is at 0x" << std::hex << b.address
                 << ", the first was at 0x" << first << ": the stale-hit check did not run";
  }
  const hmr_domain_stats before = domain_stats(domain.get());
  EXPECT_NE(reg_key_close(domain.get(), b.address, 8192), key)
      << "STALE HIT: exporter A's import's registration for exporter B's memory";
  EXPECT_EQ(domain_stats(domain.get()).cache_hits, before.cache_hits);
  domain.reset();
}

}  // namespace
}  // namespace hmr::cuda
