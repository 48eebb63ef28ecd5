// The fake CUDA driver (tests/fakes/fake_cuda*.c, a real libcuda.so.1) as public-API tests see
// it: hmr loads it through HMR_CUDA_LIBRARY, set before the first hmr call of this process;
// the tests reach its control entry points through dlsym on the same library.  The driver is
// never reset here (hmr holds it initialised), so counts are compared before and after.
#pragma once

#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <cstring>

#include "tests/api/test_support.h"
#include "tests/scoped_env.h"
#include "tests/fakes/fake_cuda_control.h"
#include "tests/hmem/fd_checks.h"

namespace hmr_hmem_test {

struct FakeCudaDriver {
  fake_cuda_alloc_fn alloc = nullptr;
  fake_cuda_alloc_pooled_fn alloc_pooled = nullptr;
  fake_cuda_release_pools_fn release_pools = nullptr;
  fake_cuda_free_fn free = nullptr;
  fake_cuda_set_failure_fn set_failure = nullptr;
  fake_cuda_set_failure_once_fn set_failure_once = nullptr;
  fake_cuda_call_count_fn call_count = nullptr;
  fake_cuda_last_export_fn last_export = nullptr;
  fake_cuda_peek_fn peek = nullptr;
  fake_cuda_poke_fn poke = nullptr;
  fake_cuda_sync_memops_fn sync_memops = nullptr;
  fake_cuda_host_registration_count_fn host_registration_count = nullptr;
  fake_cuda_primary_retains_fn primary_retains = nullptr;
  fake_cuda_current_context_device_fn current_context_device = nullptr;
};
const FakeCudaDriver& fake_cuda();

// How many cuMemGetHandleForAddressRange calls made an export (the PCIe-flag retry counts once).
int export_calls();

using hmr::testing::open_fd_count;

inline void* as_pointer(unsigned long long address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

using hmr_test::callback_nic;  // tests/api/test_support.h

// The address `offset` bytes into `base`.
inline uint8_t* at(void* base, size_t offset) { return static_cast<uint8_t*>(base) + offset; }

// Memory from the fake driver, freed when it goes out of scope (unless freed before).
class FakeAllocation {
 public:
  FakeAllocation(int device, size_t size, int memory = FAKE_CUDA_MEM_DEVICE);
  ~FakeAllocation();
  FakeAllocation(const FakeAllocation&) = delete;
  FakeAllocation& operator=(const FakeAllocation&) = delete;
  void* get() const { return as_pointer(address_); }
  unsigned long long address() const { return address_; }
  size_t size() const { return size_; }
  // cuMemFree now; the fake hands the same address out first next time.
  void free_now();

 private:
  unsigned long long address_ = 0;
  size_t size_;
};

using hmr_test::ScopedEnv;  // tests/scoped_env.h

inline constexpr uint64_t kSharingMode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;
inline constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;

// A sim domain with `nic_options` and hmr_domain_attr.flags; null (and a test failure) on error.
hmr_test::DomainPtr open_domain(const char* nic_options, uint64_t flags = 0,
                                uint64_t app_mode = kSharingMode);
// The same without a cache, for a forked child: a cache's monitor starts a thread, and
// ThreadSanitizer's runtime ends a child of a multi-threaded process that starts one.
hmr_test::DomainPtr open_child_domain(const char* nic_options);
// A domain on the callback NIC `callbacks` (which must outlive it) with hmr_domain_attr.flags
// `flags`; null (and a test failure) on error.
hmr_test::DomainPtr open_callback_domain(hmr_nic_callbacks& callbacks, uint64_t flags = 0);

// hmr_mr_regattr of [ptr, +len) declaring `iface`/`device` (iface SYSTEM: nothing declared in
// a domain without HMR_MR_HMEM).  Returns the rc; *mr set on success.
int register_attr(hmr_domain* domain, const void* ptr, size_t len, hmr_hmem_iface iface,
                  int device, uint64_t flags, hmr_mr** mr, uint64_t access = kAccess);
// Registers, expecting success.
hmr_test::MrPtr register_ok(hmr_domain* domain, const void* ptr, size_t len,
                            hmr_hmem_iface iface = HMR_HMEM_SYSTEM, int device = 0,
                            uint64_t access = kAccess);

hmr_mr_info mr_info(hmr_mr* mr);
hmr_domain_stats stats_of(hmr_domain* domain);
// hmr_detect_memory_type of the byte at `addr` succeeds and names `iface` and `kind`.
void expect_type(const void* addr, hmr_hmem_iface iface, hmr_mem_kind kind);

// Three threads registering [ptr, +len) with hmr_mr_reg again and again (the lock-free hit
// path), each key checked against `key`, until stop(): how many registrations failed or
// handed out another key.
class HittingThreads {
 public:
  HittingThreads(hmr_domain* domain, const void* ptr, size_t len, uint64_t key);
  ~HittingThreads() { stop(); }
  int stop();

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> wrong_{0};
  std::vector<std::thread> threads_;
};

}  // namespace hmr_hmem_test
