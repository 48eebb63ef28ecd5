#include "tests/hmem_api/fake_cuda_driver.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/hmem/fake_library.h"

namespace hmr_hmem_test {
namespace {

// Before main(), so before the first hmr call: hmr reads HMR_CUDA_LIBRARY when it loads the
// memory runtimes, once per process.
[[maybe_unused]] const bool kDriverChosen = [] {
  setenv("HMR_CUDA_LIBRARY", HMR_FAKE_CUDA_PATH, 1);
  setenv("HMR_ROCR_LIBRARY", HMR_FAKE_HSA_PATH, 1);  // for the ROCr free-callback monitor
  return true;
}();

FakeCudaDriver load() {
  const hmr::testing::FakeLibrary library("fake CUDA driver", HMR_FAKE_CUDA_PATH);
  FakeCudaDriver fake;
  fake.alloc = library.function<fake_cuda_alloc_fn>("fake_cuda_alloc");
  fake.alloc_pooled = library.function<fake_cuda_alloc_pooled_fn>("fake_cuda_alloc_pooled");
  fake.release_pools = library.function<fake_cuda_release_pools_fn>("fake_cuda_release_pools");
  fake.free = library.function<fake_cuda_free_fn>("fake_cuda_free");
  fake.set_failure = library.function<fake_cuda_set_failure_fn>("fake_cuda_set_failure");
  fake.set_failure_once =
      library.function<fake_cuda_set_failure_once_fn>("fake_cuda_set_failure_once");
  fake.call_count = library.function<fake_cuda_call_count_fn>("fake_cuda_call_count");
  fake.last_export = library.function<fake_cuda_last_export_fn>("fake_cuda_last_export");
  fake.peek = library.function<fake_cuda_peek_fn>("fake_cuda_peek");
  fake.poke = library.function<fake_cuda_poke_fn>("fake_cuda_poke");
  fake.sync_memops = library.function<fake_cuda_sync_memops_fn>("fake_cuda_sync_memops");
  fake.host_registration_count = library.function<fake_cuda_host_registration_count_fn>(
      "fake_cuda_host_registration_count");
  fake.primary_retains =
      library.function<fake_cuda_primary_retains_fn>("fake_cuda_primary_retains");
  fake.current_context_device =
      library.function<fake_cuda_current_context_device_fn>("fake_cuda_current_context_device");
  return fake;
}

}  // namespace

const FakeCudaDriver& fake_cuda() {
  static const FakeCudaDriver fake = load();
  return fake;
}

int export_calls() {
  // Every export first tries the PCIe mapping flag, and the fake accepts it: one call each.
  return fake_cuda().call_count("cuMemGetHandleForAddressRange");
}

FakeAllocation::FakeAllocation(int device, size_t size, int memory) : size_(size) {
  EXPECT_EQ(fake_cuda().alloc(device, size, memory, &address_), 0);
}

FakeAllocation::~FakeAllocation() {
  if (address_ != 0) free_now();
}

void FakeAllocation::free_now() {
  EXPECT_EQ(fake_cuda().free(address_), 0);
  address_ = 0;
}

namespace {
hmr_test::DomainPtr open_with(hmr_domain_attr& attr) {
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return hmr_test::DomainPtr(rc == 0 ? domain : nullptr);
}
}  // namespace

hmr_test::DomainPtr open_domain(const char* nic_options, uint64_t flags, uint64_t app_mode) {
  hmr_domain_attr attr = hmr_test::domain_attr(app_mode, nic_options);
  attr.flags = flags;
  return open_with(attr);
}

hmr_test::DomainPtr open_callback_domain(hmr_nic_callbacks& callbacks, uint64_t flags) {
  hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode);
  attr.nic = "callback";
  attr.nic_handle = &callbacks;
  attr.flags = flags;
  return open_with(attr);
}

hmr_test::DomainPtr open_child_domain(const char* nic_options) {
  hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode, nic_options);
  attr.cache_monitor = "disabled";
  return open_with(attr);
}

int register_attr(hmr_domain* domain, const void* ptr, size_t len, hmr_hmem_iface iface,
                  int device, uint64_t flags, hmr_mr** mr, uint64_t access) {
  const iovec segment = {const_cast<void*>(ptr), len};
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.mr_iov = &segment;
  attr.iov_count = 1;
  attr.access = access;
  attr.iface = iface;
  attr.device.cuda = device;
  return hmr_mr_regattr(domain, &attr, flags, mr);
}

hmr_test::MrPtr register_ok(hmr_domain* domain, const void* ptr, size_t len,
                            hmr_hmem_iface iface, int device, uint64_t access) {
  hmr_mr* mr = nullptr;
  const int rc = register_attr(domain, ptr, len, iface, device, 0, &mr, access);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return hmr_test::MrPtr(rc == 0 ? mr : nullptr);
}

hmr_mr_info mr_info(hmr_mr* mr) {
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_EQ(hmr_mr_query(mr, &info), 0) << hmr_last_error();
  return info;
}

hmr_domain_stats stats_of(hmr_domain* domain) {
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

HittingThreads::HittingThreads(hmr_domain* domain, const void* ptr, size_t len, uint64_t key) {
  for (int t = 0; t < 3; ++t) {
    threads_.emplace_back([this, domain, ptr, len, key] {
      while (!stop_.load()) {
        hmr_mr* mr = nullptr;
        if (hmr_mr_reg(domain, ptr, len, kAccess, 0, 0, 0, &mr, nullptr) != 0) {
          wrong_.fetch_add(1);
          continue;
        }
        if (hmr_mr_key(mr) != key) wrong_.fetch_add(1);
        hmr_mr_close(mr);
      }
    });
  }
}

int HittingThreads::stop() {
  stop_.store(true);
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  return wrong_.load();
}

void expect_type(const void* addr, hmr_hmem_iface iface, hmr_mem_kind kind) {
  hmr_hmem_iface found_iface = HMR_HMEM_SYNAPSEAI;  // (neither is what any test expects)
  hmr_mem_kind found_kind = HMR_MEM_MANAGED;
  ASSERT_HMR_OK(hmr_detect_memory_type(addr, 1, &found_iface, &found_kind));
  EXPECT_EQ(found_iface, iface);
  EXPECT_EQ(found_kind, kind);
}

}  // namespace hmr_hmem_test
