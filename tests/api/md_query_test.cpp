// hmr_md_query (UCX md_query) and large host registrations through the public API: bad
// arguments, values on the sim NIC, the registration cost, and pre-faulting by threshold.
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../scoped_env.h"
#include "test_support.h"

namespace hmr_test {
namespace {

hmr_md_attr md_attr(uint64_t fields = 0) {
  hmr_md_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.field_mask = fields;
  return attr;
}

TEST(MdQuery, BadArguments) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  ASSERT_TRUE(domain);
  hmr_md_attr attr = md_attr();
  EXPECT_HMR_ERROR(hmr_md_query(nullptr, &attr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_md_query(domain.get(), nullptr), HMR_EINVAL);
  // Not a domain: an MR handle of it.
  Pages pages(4096);
  MrPtr mr = reg(domain.get(), pages.data(), pages.size(), HMR_READ);
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(hmr_md_query(reinterpret_cast<hmr_domain*>(mr.get()), &attr), HMR_EINVAL);

  hmr_md_attr small = md_attr();
  small.size = sizeof(size_t);
  EXPECT_HMR_ERROR(hmr_md_query(domain.get(), &small), HMR_EINVAL);
  // A newer, longer struct with bytes this hmr does not know.
  std::vector<unsigned char> longer(sizeof(hmr_md_attr) + 16, 0);
  hmr_md_attr* newer = reinterpret_cast<hmr_md_attr*>(longer.data());
  newer->size = longer.size();
  longer[sizeof(hmr_md_attr) + 3] = 1;
  EXPECT_HMR_ERROR(hmr_md_query(domain.get(), newer), HMR_EINVAL);
  longer[sizeof(hmr_md_attr) + 3] = 0;
  EXPECT_EQ(hmr_md_query(domain.get(), newer), 0) << hmr_last_error();

  hmr_md_attr unknown = md_attr(1ULL << 40);
  unknown.max_reg = 12345;
  EXPECT_HMR_ERROR(hmr_md_query(domain.get(), &unknown), HMR_EBADFLAGS);
  EXPECT_EQ(unknown.max_reg, 12345u);  // nothing written on failure
}

TEST(MdQuery, DescribesTheSimNic) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR,
                                 "key_size=4;max_mr_size=1048576;dmabuf=1");
  ASSERT_TRUE(domain);
  hmr_md_attr attr = md_attr();
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &attr));
  EXPECT_EQ(attr.size, sizeof attr);
  EXPECT_EQ(attr.max_reg, 1048576u);
  EXPECT_EQ(attr.key_size, 4u);
  EXPECT_EQ(attr.rkey_packed_size, 48u);  // hmr_rkey_pack: 40-byte header, 4-byte key, checksum
  EXPECT_NE(attr.reg_mem_types & HMR_HMEM_IFACE_BIT(HMR_HMEM_SYSTEM), 0u);
  EXPECT_NE(attr.detect_mem_types & HMR_HMEM_IFACE_BIT(HMR_HMEM_SYSTEM), 0u);
  EXPECT_NE(attr.alloc_mem_types & HMR_HMEM_IFACE_BIT(HMR_HMEM_SYSTEM), 0u);
  EXPECT_EQ(attr.reg_mem_types >> HMR_HMEM_IFACE_COUNT, 0u);
  EXPECT_NE(attr.flags & HMR_MD_FLAG_DMABUF, 0u);
  EXPECT_EQ(attr.flags & HMR_MD_FLAG_RAW_KEYS, 0u);
  // Not asked for: not measured, left zero.
  EXPECT_EQ(attr.reg_cost.overhead_ns, 0.0);
  EXPECT_EQ(attr.reg_cost_measured, 0);

  // The cache flag follows the domain's cache.
  hmr_domain_attr uncached_attr = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  uncached_attr.cache_monitor = "disabled";
  hmr_domain* uncached = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&uncached_attr, &uncached));
  DomainPtr uncached_owner(uncached);
  hmr_md_attr other = md_attr();
  ASSERT_HMR_OK(hmr_md_query(uncached, &other));
  EXPECT_EQ(other.flags & HMR_MD_FLAG_CACHE, 0u);
  EXPECT_GT(other.max_reg, 1048576u);  // the sim NIC's default
}

// A NIC that requires MR_LOCAL but whose bytes hmr's own endpoints move (the software NIC):
// hmr registers what they use, so the application is not asked for local descriptors.
TEST(MdQuery, LocalDescriptorsAreAskedForOnlyWhereTheApplicationMovesTheBytes) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "require=LOCAL");
  ASSERT_TRUE(domain);
  hmr_md_attr attr = md_attr();
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &attr));
  EXPECT_EQ(attr.flags & HMR_MD_FLAG_LOCAL_DESCRIPTORS, 0u);
}

// The bound on registrations hmr holds at the NIC, idle cached ones included (docs/
// semantics.md, "Under pressure"), and where it comes from.
TEST(MdQuery, SaysHowManyRegistrationsTheNicHoldsAndWhoSaidSo) {
  {
    DomainPtr nic_limited = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "mr_cnt=100");
    ASSERT_TRUE(nic_limited);
    hmr_md_attr attr = md_attr();
    ASSERT_HMR_OK(hmr_md_query(nic_limited.get(), &attr));
    EXPECT_EQ(attr.max_registrations, 100u);
    ASSERT_NE(attr.max_registrations_source, nullptr);
    EXPECT_STREQ(attr.max_registrations_source, "nic");
  }
  {
    hmr_domain_attr asked = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "mr_cnt=100");
    asked.mr_cnt = 10;
    hmr_domain* raw = nullptr;
    ASSERT_HMR_OK(hmr_domain_open(&asked, &raw));
    DomainPtr app_limited(raw);
    hmr_md_attr attr = md_attr();
    ASSERT_HMR_OK(hmr_md_query(app_limited.get(), &attr));
    EXPECT_EQ(attr.max_registrations, 10u);
    EXPECT_STREQ(attr.max_registrations_source, "application");
  }
  {
    // A callback NIC that states no limit (mr_cnt 0).
    hmr_nic_callbacks callbacks;
    std::memset(&callbacks, 0, sizeof callbacks);
    callbacks.size = sizeof callbacks;
    callbacks.key_size = 8;
    callbacks.reg_va = [](void*, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
      mr->key = 1;
      return 0;
    };
    callbacks.dereg = [](void*, const hmr_nic_mr*, char*, size_t) { return 0; };
    hmr_domain_attr attr_in = callback_domain_attr(callbacks, HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
    hmr_domain* raw = nullptr;
    ASSERT_HMR_OK(hmr_domain_open(&attr_in, &raw));
    DomainPtr unlimited(raw);
    hmr_md_attr attr = md_attr();
    ASSERT_HMR_OK(hmr_md_query(unlimited.get(), &attr));
    EXPECT_EQ(attr.max_registrations, 0u);
    EXPECT_STREQ(attr.max_registrations_source, "none");
    // A caller built before these fields: served, and nothing written past its size.
    hmr_md_attr older = md_attr();
    older.size = offsetof(hmr_md_attr, max_registrations);
    older.max_registrations = 777;
    ASSERT_HMR_OK(hmr_md_query(unlimited.get(), &older));
    EXPECT_EQ(older.max_registrations, 777u);
  }
}

TEST(MdQuery, RawKeysArePackedWhole) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_RAW,
                                 "require=RAW;key_size=16");
  ASSERT_TRUE(domain);
  hmr_md_attr attr = md_attr();
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &attr));
  EXPECT_NE(attr.flags & HMR_MD_FLAG_RAW_KEYS, 0u);
  EXPECT_EQ(attr.key_size, 16u);
  EXPECT_EQ(attr.rkey_packed_size, 60u);  // the 16-byte raw key whole
}

TEST(MdQuery, RegistrationCostIsMeasuredOnceAndKept) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  ASSERT_TRUE(domain);
  hmr_md_attr first = md_attr(HMR_MD_ATTR_REG_COST);
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &first));
  EXPECT_EQ(first.reg_cost_measured, 1);
  EXPECT_GT(first.reg_cost.overhead_ns, 0.0);
  EXPECT_GE(first.reg_cost.ns_per_byte, 0.0);
  hmr_md_attr second = md_attr(HMR_MD_ATTR_REG_COST);
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &second));
  EXPECT_EQ(second.reg_cost.overhead_ns, first.reg_cost.overhead_ns);
  EXPECT_EQ(second.reg_cost.ns_per_byte, first.reg_cost.ns_per_byte);
  // A measurement, not a registration of the application's: no MR, no cache entry, no
  // statistics left behind (it goes through the registrar for its limits only).
  const hmr_domain_stats stats = domain_stats(domain.get());
  EXPECT_EQ(stats.nic_registrations, 0u);
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.cache_regions, 0u);
}

// Under a pinned-byte bound below the 4 MiB it measured with (a NIC's own here; RLIMIT_MEMLOCK
// alike), the measurement fits the bound: the query failed with HMR_ENOMEM, and the failure was
// counted as a NIC refusal (a review's finding).
TEST(MdQuery, RegistrationCostIsMeasuredWithinThePinnedBound) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "max_pinned=1048576");
  ASSERT_TRUE(domain);
  hmr_md_attr attr = md_attr(HMR_MD_ATTR_REG_COST);
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &attr));
  EXPECT_EQ(attr.reg_cost_measured, 1);
  EXPECT_GT(attr.reg_cost.overhead_ns, 0.0);
  const hmr_domain_stats stats = domain_stats(domain.get());
  EXPECT_EQ(stats.nic_refusals, 0u);
  EXPECT_EQ(stats.nic_pinned_bytes, 0u);

  DomainPtr too_small = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "max_pinned=4096");
  ASSERT_TRUE(too_small);
  hmr_md_attr refused = md_attr(HMR_MD_ATTR_REG_COST);
  EXPECT_EQ(hmr_md_query(too_small.get(), &refused), -HMR_ENOMEM);
  EXPECT_NE(std::strstr(hmr_last_error(), "max_pinned_bytes"), nullptr) << hmr_last_error();
}

TEST(MdQuery, RegistrationCostWithApplicationKeys) {
  // Without PROV_KEY the measurement picks keys of its own, never one an open MR holds.
  DomainPtr domain = open_domain(HMR_MR_VIRT_ADDR, "key_size=2");
  ASSERT_TRUE(domain);
  Pages pages(4096);
  MrPtr mr = reg(domain.get(), pages.data(), pages.size(), HMR_REMOTE_READ, 0xffff);
  ASSERT_TRUE(mr);
  hmr_md_attr attr = md_attr(HMR_MD_ATTR_REG_COST);
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &attr));
  EXPECT_GT(attr.reg_cost.overhead_ns, 0.0);
  EXPECT_EQ(hmr_mr_key(mr.get()), 0xffffu);
  // The key the measurement used is free again.
  Pages more(4096);
  MrPtr second = reg(domain.get(), more.data(), more.size(), HMR_REMOTE_READ, 0xfffe);
  EXPECT_TRUE(second);
}

// ---- large registrations: pre-faulting by HMR_REG_PREFAULT_MIN (read at hmr_domain_open) ----

size_t resident_pages(const void* addr, size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> present(len / page);
  if (mincore(const_cast<void*>(addr), len, present.data()) != 0) return SIZE_MAX;
  size_t count = 0;
  for (unsigned char bit : present) count += bit & 1;
  return count;
}

// The bytes of private copies ("Anonymous:" in /proc/self/smaps) in the mapping at `start`.
size_t anonymous_bytes_of(const void* start) {
  std::FILE* smaps = std::fopen("/proc/self/smaps", "re");
  if (smaps == nullptr) return SIZE_MAX;
  char line[512];
  bool in_mapping = false;
  size_t bytes = SIZE_MAX;
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    uintptr_t low = 0;
    uintptr_t high = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &low, &high) == 2 &&
        std::strchr(line, '-') < std::strchr(line, ' ')) {
      in_mapping = low == reinterpret_cast<uintptr_t>(start);
      continue;
    }
    unsigned long long kib = 0;
    if (in_mapping && std::sscanf(line, "Anonymous: %llu kB", &kib) == 1) {
      bytes = static_cast<size_t>(kib) << 10;
      break;
    }
  }
  std::fclose(smaps);
  return bytes;
}

TEST(LargeRegistration, PrefaultsAboveTheThresholdOnly) {
  ScopedEnv threshold("HMR_REG_PREFAULT_MIN", "16777216");
  ScopedEnv threads("HMR_REG_THREADS", "3");
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "pins=1");
  ASSERT_TRUE(domain);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Pages small(8 << 20);
  Pages large(32 << 20);
  ASSERT_EQ(resident_pages(small.data(), small.size()), 0u);
  ASSERT_EQ(resident_pages(large.data(), large.size()), 0u);
  MrPtr small_mr = reg(domain.get(), small.data(), small.size(), HMR_READ | HMR_REMOTE_WRITE);
  MrPtr large_mr = reg(domain.get(), large.data(), large.size(), HMR_READ | HMR_REMOTE_WRITE);
  ASSERT_TRUE(small_mr && large_mr);
  EXPECT_EQ(resident_pages(small.data(), small.size()), 0u);
  EXPECT_EQ(resident_pages(large.data(), large.size()), large.size() / page);
}

// Pre-faulting serves a pin: a NIC that pins nothing (a software NIC, libfabric's tcp and shm)
// gets a sparse range as it is, and a range refused for the pinned bound is refused before
// anything is populated (a review found 256 MiB made resident for either).
TEST(LargeRegistration, OnlyWhatANicWillPinIsPrefaulted) {
  ScopedEnv threshold("HMR_REG_PREFAULT_MIN", "16777216");
  Pages sparse(32 << 20);
  DomainPtr copying = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  ASSERT_TRUE(copying);
  MrPtr mr = reg(copying.get(), sparse.data(), sparse.size(), HMR_READ | HMR_REMOTE_WRITE);
  ASSERT_TRUE(mr);
  EXPECT_EQ(resident_pages(sparse.data(), sparse.size()), 0u) << "a NIC that pins nothing";
  mr.reset();

  DomainPtr bounded = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "max_pinned=1048576");
  ASSERT_TRUE(bounded);
  hmr_mr* refused = nullptr;
  EXPECT_EQ(hmr_mr_reg(bounded.get(), sparse.data(), sparse.size(), HMR_READ | HMR_REMOTE_WRITE,
                       0, 0, 0, &refused, nullptr),
            -HMR_ENOMEM);
  EXPECT_EQ(resident_pages(sparse.data(), sparse.size()), 0u) << "populated, then refused";
}

// A read-only registration is populated for reading, as the kernel pins it (ib_umem_get asks
// for write access only for a writable one): a private file mapping gets no copies of its
// pages.  A writable one gets them, as its pin would make them.
TEST(LargeRegistration, AReadOnlyRegistrationIsPrefaultedForReading) {
  ScopedEnv threshold("HMR_REG_PREFAULT_MIN", "16777216");
  constexpr size_t kLen = 16 << 20;
  char path[] = "/tmp/hmr-prefault-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, kLen), 0);
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "pins=1");
  ASSERT_TRUE(domain);
  for (const bool writable : {false, true}) {
    void* file = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ASSERT_NE(file, MAP_FAILED);
    MrPtr mr = reg(domain.get(), file, kLen, writable ? HMR_REMOTE_WRITE : HMR_REMOTE_READ);
    ASSERT_TRUE(mr);
    const size_t copies = anonymous_bytes_of(file);
    mr.reset();
    ASSERT_EQ(hmr_domain_cache_flush(domain.get()), 0);
    munmap(file, kLen);
    if (writable) {
      EXPECT_EQ(copies, kLen) << "a writable registration's pages are copied, as its pin's";
    } else {
      EXPECT_EQ(copies, 0u) << "a read-only registration copied the file's pages";
    }
  }
  close(fd);
}

TEST(LargeRegistration, BadEnvironmentFailsTheOpen) {
  for (const char* bad : {"0", "many", "100000"}) {
    ScopedEnv threads("HMR_REG_THREADS", bad);
    hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY);
    hmr_domain* domain = nullptr;
    EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
    EXPECT_NE(std::strstr(hmr_last_error(), "HMR_REG_THREADS"), nullptr) << hmr_last_error();
  }
  ScopedEnv threshold("HMR_REG_PREFAULT_MIN", "-1");
  hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY);
  hmr_domain* domain = nullptr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
}

}  // namespace
}  // namespace hmr_test
