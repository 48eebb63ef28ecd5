// Handles used after their close, through every function that takes them: each call must
// answer -HMR_EINVAL (or the function's "invalid" value) with a reason and touch nothing.  The
// objects behind handles live in hmr's handle storage (util/handle_storage.h), so a closed
// handle points at memory hmr still owns with a dead tag; before, these calls read freed
// memory (AddressSanitizer's heap-use-after-free in the sanitizer build, a crash or a silent
// success elsewhere).  Each stale handle is used before any other object of its kind is made,
// since a later object may reuse its storage, as with any allocator.
#include <cstdint>
#include <cstring>

#include "memory_ops_support.h"

namespace {

using hmr_test::Pages;

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr uint64_t kMode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_ALLOCATED;

template <typename T>
T* sentinel() {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(0x1));
}

// Every call that takes an MR, on a closed one.
void expect_mr_refused(hmr_domain* domain, hmr_mr* closed, const Pages& pages) {
  EXPECT_HMR_ERROR(hmr_mr_close(closed), HMR_EINVAL);
  EXPECT_EQ(hmr_mr_key(closed), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(closed), nullptr);
  uint64_t base = 7;
  uint8_t raw[16];
  size_t raw_size = sizeof raw;
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(closed, &base, raw, &raw_size, 0), HMR_EINVAL);
  EXPECT_EQ(base, 7u);
  hmr_mr_rereg_attr rereg;
  std::memset(&rereg, 0, sizeof rereg);
  rereg.size = sizeof rereg;
  rereg.access = HMR_REMOTE_READ;
  EXPECT_HMR_ERROR(hmr_mr_rereg(closed, HMR_MR_REREG_ACCESS, &rereg), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(closed, pages.data(), kPage, HMR_MADV_WILLNEED), HMR_EINVAL);
  uint8_t packed[HMR_RKEY_PACKED_MAX];
  size_t packed_len = sizeof packed;
  EXPECT_HMR_ERROR(hmr_rkey_pack(closed, packed, &packed_len), HMR_EINVAL);
  EXPECT_EQ(packed_len, sizeof packed);
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_HMR_ERROR(hmr_mr_query(closed, &info), HMR_EINVAL);
  const hmr_mr_segment segment = {closed, pages.data(), 64};
  hmr_mr* indirect = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg_indirect(domain, &segment, 1, kRemote, &indirect), HMR_EINVAL);
  EXPECT_EQ(indirect, sentinel<hmr_mr>());
}

TEST(ClosedHandles, MemoryRegionsOfTheFullPathAndOfTheHitPath) {
  hmr_test::DomainPtr domain = hmr_test::open_domain(kMode);
  ASSERT_TRUE(domain);
  Pages pages(2 * kPage);
  // The first registration takes the full path; the second of the same range is a cache hit.
  hmr_mr* first = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain.get(), pages.data(), kPage, kRemote, 0, 0, 0, &first, nullptr));
  hmr_mr* hit = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain.get(), pages.data(), kPage, kRemote, 0, 0, 0, &hit, nullptr));
  ASSERT_HMR_OK(hmr_mr_close(first));
  ASSERT_HMR_OK(hmr_mr_close(hit));
  {
    SCOPED_TRACE("full-path MR");
    expect_mr_refused(domain.get(), first, pages);
  }
  {
    SCOPED_TRACE("cache-hit MR");
    expect_mr_refused(domain.get(), hit, pages);
  }
  // A first registration of plain host memory is handed out as a hit's handle too; an MR
  // that windows may bind (HMR_MW_BIND) is never shared, so it is a MemoryRegion.
  hmr_mr* own = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain.get(), pages.data() + kPage, kPage, kRemote | HMR_MW_BIND, 0,
                           0, 0, &own, nullptr));
  ASSERT_HMR_OK(hmr_mr_close(own));
  {
    SCOPED_TRACE("MemoryRegion of the full path (HMR_MW_BIND)");
    expect_mr_refused(domain.get(), own, pages);
  }
}

TEST(ClosedHandles, IndirectKeysWindowsAndRemoteKeys) {
  hmr_test::DomainPtr domain = hmr_test::open_domain(kMode);
  ASSERT_TRUE(domain);
  Pages pages(2 * kPage);
  hmr_test::MrPtr mr =
      hmr_test::reg(domain.get(), pages.data(), kPage, kRemote | HMR_MW_BIND);
  ASSERT_TRUE(mr);

  const hmr_mr_segment segment = {mr.get(), pages.data(), 128};
  hmr_mr* indirect = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg_indirect(domain.get(), &segment, 1, kRemote, &indirect));
  ASSERT_HMR_OK(hmr_mr_close(indirect));
  {
    SCOPED_TRACE("indirect key");
    expect_mr_refused(domain.get(), indirect, pages);
  }

  hmr_mw* window = nullptr;
  ASSERT_HMR_OK(hmr_mw_alloc(domain.get(), HMR_MW_TYPE_2, &window));
  ASSERT_HMR_OK(hmr_mw_close(window));
  uint64_t key = 5;
  EXPECT_HMR_ERROR(hmr_mw_bind(window, mr.get(), pages.data(), 64, HMR_REMOTE_READ, nullptr, &key),
                   HMR_EINVAL);
  EXPECT_EQ(key, 5u);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(window), HMR_EINVAL);

  uint8_t packed[HMR_RKEY_PACKED_MAX];
  size_t packed_len = sizeof packed;
  ASSERT_HMR_OK(hmr_rkey_pack(mr.get(), packed, &packed_len));
  hmr_rkey* rkey = nullptr;
  ASSERT_HMR_OK(hmr_rkey_unpack(domain.get(), packed, packed_len, &rkey));
  ASSERT_HMR_OK(hmr_rkey_release(rkey));
  hmr_rkey_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_HMR_ERROR(hmr_rkey_query(rkey, &info), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_rkey_release(rkey), HMR_EINVAL);
  // The domain's count of open objects was not disturbed by the second release.
  mr.reset();
  EXPECT_EQ(hmr_domain_close(domain.release()), 0) << hmr_last_error();
}

TEST(ClosedHandles, CountersEndpointsEventQueuesAndDomains) {
  hmr_domain* domain = hmr_test::open_sim_domain(kMode);
  ASSERT_NE(domain, nullptr);
  hmr_cntr_attr cntr_attr{sizeof cntr_attr, 0};
  hmr_cntr* counter = nullptr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, &cntr_attr, &counter));
  ASSERT_HMR_OK(hmr_cntr_close(counter));
  uint64_t value = 3;
  EXPECT_HMR_ERROR(hmr_cntr_read(counter, &value), HMR_EINVAL);
  EXPECT_EQ(value, 3u);
  EXPECT_HMR_ERROR(hmr_cntr_close(counter), HMR_EINVAL);

  hmr_ep_attr ep_attr{sizeof ep_attr, 0};
  hmr_ep* endpoint = nullptr;
  ASSERT_HMR_OK(hmr_ep_open(domain, &ep_attr, &endpoint));
  ASSERT_HMR_OK(hmr_ep_close(endpoint));
  EXPECT_HMR_ERROR(hmr_ep_connect(endpoint, endpoint), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_close(endpoint), HMR_EINVAL);

  hmr_eq_attr eq_attr;
  std::memset(&eq_attr, 0, sizeof eq_attr);
  eq_attr.size = sizeof eq_attr;
  hmr_eq* queue = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(&eq_attr, &queue));
  ASSERT_HMR_OK(hmr_eq_close(queue));
  uint32_t event = 0;
  hmr_eq_entry entry;
  EXPECT_LT(hmr_eq_read(queue, &event, &entry, 0), 0);
  EXPECT_HMR_ERROR(hmr_eq_close(queue), HMR_EINVAL);

  ASSERT_HMR_OK(hmr_domain_close(domain));
  EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EINVAL);
  Pages pages(kPage);
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain, pages.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr),
                   HMR_EINVAL);
  EXPECT_EQ(mr, sentinel<hmr_mr>());
  hmr_md_attr md;
  std::memset(&md, 0, sizeof md);
  md.size = sizeof md;
  EXPECT_HMR_ERROR(hmr_md_query(domain, &md), HMR_EINVAL);
  // (The audit found hmr_domain_cache_flush tested with NULL only.)
  EXPECT_HMR_ERROR(hmr_domain_cache_flush(domain), HMR_EINVAL);
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_HMR_ERROR(hmr_domain_query_stats(domain, &stats), HMR_EINVAL);
}

}  // namespace
