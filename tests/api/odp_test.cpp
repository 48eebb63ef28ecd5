// On-demand paging through the C ABI on the sim NIC: an HMR_MR_ODP registration needs no
// pages behind it (not even in an ALLOCATED domain) and RMA reaches a page once it exists; an
// implicit registration of the whole address space reaches every mapped buffer by its
// address; hmr_mem_advise(WILLNEED) makes an ODP MR's pages resident; ODP MRs are never
// shared through the cache.  The ofi NIC has none of it.  The contract is hmr.h ("memory
// operations").
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "memory_ops_raw_enum_calls.h"
#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

// Anonymous pages mapped by the test, which may unmap part of them to make a hole.
class Mapping {
 public:
  explicit Mapping(size_t len) : len_(len) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    if (p != MAP_FAILED) address_ = static_cast<uint8_t*>(p);
  }
  ~Mapping() {
    if (address_ != nullptr) munmap(address_, len_);  // holes inside are fine for munmap
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return address_; }

 private:
  uint8_t* address_ = nullptr;
  size_t len_;
};

bool is_mapped(const void* page, size_t len) {
  return msync(const_cast<void*>(page), len, MS_ASYNC) == 0;
}

// Maps anonymous pages at exactly `address`; false when something else took the address.
bool map_at(uint8_t* address, size_t len) {
  void* p = mmap(address, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return false;
  if (p != address) {  // kernels before 4.17 take the flag as a hint
    munmap(p, len);
    return false;
  }
  return true;
}

// Which of the pages of [address, +pages * kPage) are resident.
std::vector<bool> resident(const uint8_t* address, size_t pages) {
  std::vector<unsigned char> vec(pages, 0);
  EXPECT_EQ(mincore(const_cast<uint8_t*>(address), pages * kPage, vec.data()), 0)
      << std::strerror(errno);
  std::vector<bool> out(pages);
  for (size_t i = 0; i < pages; ++i) out[i] = (vec[i] & 1) != 0;
  return out;
}

hmr_mr* reg_odp(hmr_domain* domain, const void* buf, size_t len, uint64_t access,
                uint64_t requested_key = 0) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, buf, len, access, 0, requested_key, HMR_MR_ODP, &mr, nullptr);
  EXPECT_EQ(rc, 0) << "ODP hmr_mr_reg: " << hmr_last_error();
  return rc == 0 ? mr : nullptr;
}

// ============================================================== availability

TEST(Odp, SimDomainsOfferItImplicitOnlyWithVirtAddr) {
  DomainPtr virt = open_domain(kVirtProvKey);
  ASSERT_TRUE(virt);
  EXPECT_EQ(query_op(virt.get(), HMR_MD_OP_ODP).rc, 1);
  EXPECT_EQ(query_op(virt.get(), HMR_MD_OP_IMPLICIT_ODP).rc, 1);
  EXPECT_EQ(query_op(virt.get(), HMR_MD_OP_ADVISE).rc, 1);

  hmr_domain_attr attr;
  DomainPtr offsets = open_domain(HMR_MR_PROV_KEY, "require=PROV_KEY", &attr);
  ASSERT_TRUE(offsets);
  ASSERT_EQ(attr.mr_mode & HMR_MR_VIRT_ADDR, 0u);
  EXPECT_EQ(query_op(offsets.get(), HMR_MD_OP_ODP).rc, 1);
  expect_unavailable(offsets.get(), HMR_MD_OP_IMPLICIT_ODP);
}

// ============================================================== pages that do not exist yet

TEST(Odp, UnmappedRangeRegistersOnlyWithOdpAndIsReachedOnceMapped) {
  hmr_domain_attr attr;
  DomainPtr domain = open_domain(HMR_MR_ALLOCATED, "require=ALLOCATED", &attr);
  ASSERT_TRUE(domain);
  ASSERT_EQ(attr.mr_mode, HMR_MR_ALLOCATED);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  Mapping pages(3 * kPage);
  ASSERT_NE(pages.data(), nullptr);
  std::memset(pages.data(), 0, 3 * kPage);
  uint8_t* const hole = pages.data() + kPage;
  ASSERT_EQ(munmap(hole, kPage), 0) << std::strerror(errno);
  if (is_mapped(hole, kPage)) GTEST_SKIP() << "another mapping took the hole at once";

  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), hole, kPage, kRemote, 0, 1, 0, &mr, nullptr),
                   HMR_EFAULT);
  EXPECT_EQ(mr, sentinel<hmr_mr>()) << "*mr written on failure";

  MrPtr odp(reg_odp(domain.get(), hole, kPage, kRemote, 2));
  ASSERT_TRUE(odp);
  // One registration across the hole: its mapped pages are reachable, the hole is not.
  MrPtr across(reg_odp(domain.get(), pages.data(), 3 * kPage, kRemote, 3));
  ASSERT_TRUE(across);
  const std::vector<uint8_t> out = pattern(64, 4);
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, 100, 3));
  EXPECT_EQ(std::memcmp(pages.data() + 100, out.data(), out.size()), 0);
  EXPECT_HMR_ERROR(
      hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, kPage + 100, 3),
      HMR_EFAULT);
  EXPECT_HMR_ERROR(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, 100, 2),
                   HMR_EFAULT);
  std::vector<uint8_t> in(out.size(), 0);
  EXPECT_HMR_ERROR(hmr_ep_read(link.initiator.get(), in.data(), in.size(), nullptr, 100, 2),
                   HMR_EFAULT);

  if (!map_at(hole, kPage)) GTEST_SKIP() << "another mapping took the hole before the test";
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, 100, 2));
  EXPECT_EQ(std::memcmp(hole + 100, out.data(), out.size()), 0);
  ASSERT_HMR_OK(hmr_ep_read(link.initiator.get(), in.data(), in.size(), nullptr, 100, 2));
  EXPECT_EQ(in, out);
  const std::vector<uint8_t> again = pattern(32, 44);
  ASSERT_HMR_OK(
      hmr_ep_write(link.initiator.get(), again.data(), again.size(), nullptr, kPage + 200, 3));
  EXPECT_EQ(std::memcmp(hole + 200, again.data(), again.size()), 0);
}

TEST(Odp, MrsAreNeverShared) {
  expect_never_shared(2 * kPage, [](hmr_domain* domain, const void* buf, size_t len) {
    return MrPtr(reg_odp(domain, buf, len, kRemote));
  });
}

// ============================================================== implicit ODP

TEST(Odp, ImplicitRegistrationReachesEveryMappedBuffer) {
  Pages before(kPage);
  std::memset(before.data(), 0, before.size());
  LoopbackMr whole(open_domain(kVirtProvKey), nullptr, SIZE_MAX, kRemote, 0, HMR_MR_ODP);
  ASSERT_TRUE(whole);
  hmr_ep* const initiator = whole.initiator();
  const uint64_t key = hmr_mr_key(whole.mr.get());
  ASSERT_NE(key, HMR_KEY_NOTAVAIL);
  EXPECT_EQ(query_mr(whole.mr.get()).cached, 0);
  Pages after(2 * kPage);  // mapped after the registration
  std::memset(after.data(), 0, after.size());

  const std::vector<uint8_t> out = pattern(64, 6);
  ASSERT_HMR_OK(hmr_ep_write(initiator, out.data(), out.size(), nullptr,
                             va(before.data()) + 10, key));
  EXPECT_EQ(std::memcmp(before.data() + 10, out.data(), out.size()), 0);
  ASSERT_HMR_OK(hmr_ep_write(initiator, out.data(), out.size(), nullptr,
                             va(after.data()) + kPage + 20, key));
  EXPECT_EQ(std::memcmp(after.data() + kPage + 20, out.data(), out.size()), 0);
  // A heap object as well: nothing about it was page aligned or registered.
  std::vector<uint8_t> heap(300, 0);
  ASSERT_HMR_OK(hmr_ep_write(initiator, out.data(), out.size(), nullptr,
                             va(heap.data()) + 7, key));
  EXPECT_EQ(std::memcmp(heap.data() + 7, out.data(), out.size()), 0);
  std::vector<uint8_t> in(out.size(), 0);
  ASSERT_HMR_OK(hmr_ep_read(initiator, in.data(), in.size(), nullptr,
                            va(before.data()) + 10, key));
  EXPECT_EQ(in, out);

  // The page at 4096 is below every mmap_min_addr: never mapped.
  EXPECT_HMR_ERROR(hmr_ep_write(initiator, out.data(), out.size(), nullptr, 4096, key),
                   HMR_EFAULT);
}

TEST(Odp, ImplicitRegistrationNeedsVirtAddrAndTheOdpFlag) {
  hmr_domain_attr attr;
  DomainPtr offsets = open_domain(HMR_MR_PROV_KEY, "require=PROV_KEY", &attr);
  ASSERT_TRUE(offsets);
  ASSERT_EQ(attr.mr_mode & HMR_MR_VIRT_ADDR, 0u);
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(
      hmr_mr_reg(offsets.get(), nullptr, SIZE_MAX, kRemote, 0, 0, HMR_MR_ODP, &mr, nullptr),
      HMR_EINVAL);
  DomainPtr requested_keys = open_domain(0);
  ASSERT_TRUE(requested_keys);
  EXPECT_HMR_ERROR(hmr_mr_reg(requested_keys.get(), nullptr, SIZE_MAX, kRemote, 0, 9, HMR_MR_ODP,
                              &mr, nullptr),
                   HMR_EINVAL);

  DomainPtr virt = open_domain(kVirtProvKey);
  ASSERT_TRUE(virt);
  EXPECT_HMR_ERROR(hmr_mr_reg(virt.get(), nullptr, SIZE_MAX, kRemote, 0, 0, 0, &mr, nullptr),
                   HMR_EINVAL);
  EXPECT_EQ(mr, sentinel<hmr_mr>()) << "*mr written on failure";
}

TEST(Odp, SegmentLengthsThatWrapAreRefused) {
  // ODP skips the ALLOCATED check, so the length arithmetic is the only guard left against
  // absurd ranges: two halves of the address space must not add up to one page.
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  const iovec halves[] = {{reinterpret_cast<void*>(0x10000), size_t{1} << 63},
                          {reinterpret_cast<void*>(0x10000), (size_t{1} << 63) + 4096}};
  hmr_mr* mr = sentinel<hmr_mr>();
  hmr_domain_attr attr;
  DomainPtr wide = open_domain(kVirtProvKey, "iov_limit=4", &attr);
  ASSERT_TRUE(wide);
  EXPECT_HMR_ERROR(hmr_mr_regv(wide.get(), halves, 2, kRemote, 0, 0, HMR_MR_ODP, &mr, nullptr),
                   HMR_EINVAL);
  EXPECT_EQ(mr, sentinel<hmr_mr>());
}

// ============================================================== advice

TEST(OdpAdvise, WillneedMakesTheRangeResident) {
  constexpr size_t kPages = 8;
  Mapping fresh(kPages * kPage);  // never touched: no page exists yet
  ASSERT_NE(fresh.data(), nullptr);
  const std::vector<bool> none(kPages, false);
  ASSERT_EQ(resident(fresh.data(), kPages), none) << "a fresh anonymous mapping has pages";
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  MrPtr mr(reg_odp(domain.get(), fresh.data(), kPages * kPage, kRemote));
  ASSERT_TRUE(mr);
  EXPECT_EQ(resident(fresh.data(), kPages), none) << "an ODP registration pinned pages";
  ASSERT_HMR_OK(hmr_mem_advise(mr.get(), fresh.data(), kPages * kPage, HMR_MADV_NORMAL));
  EXPECT_EQ(resident(fresh.data(), kPages), none) << "NORMAL advice touched pages";

  ASSERT_HMR_OK(hmr_mem_advise(mr.get(), fresh.data() + 2 * kPage, 3 * kPage, HMR_MADV_WILLNEED));
  const std::vector<bool> after = resident(fresh.data(), kPages);
  for (size_t page = 2; page < 5; ++page) EXPECT_TRUE(after[page]) << "page " << page;

  ASSERT_HMR_OK(hmr_mem_advise(mr.get(), fresh.data(), kPages * kPage, HMR_MADV_WILLNEED));
  EXPECT_EQ(resident(fresh.data(), kPages), std::vector<bool>(kPages, true));
}

TEST(OdpAdvise, WillneedOnAPinnedMrHasNothingToDo) {
  DomainAndMr pinned(open_domain(kVirtProvKey), 2 * kPage, kRemote);
  ASSERT_TRUE(pinned);
  hmr_mr* const mr = pinned.mr.get();
  uint8_t* const memory = pinned.memory.data();
  EXPECT_EQ(hmr_mem_advise(mr, memory, 2 * kPage, HMR_MADV_WILLNEED), 0) << hmr_last_error();
  EXPECT_EQ(hmr_mem_advise(mr, memory + 10, 20, HMR_MADV_NORMAL), 0) << hmr_last_error();
}

TEST(OdpAdvise, BadArguments) {
  Pages memory(4 * kPage);
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  uint8_t* const start = memory.data() + kPage;
  MrPtr mr(reg_odp(domain.get(), start, 2 * kPage, kRemote));
  ASSERT_TRUE(mr);

  for (const int advice : {2, 3, -1, 1 << 20}) {
    SCOPED_TRACE("advice " + std::to_string(advice));
    EXPECT_HMR_ERROR(raw_mem_advise(mr.get(), start, kPage, advice), HMR_EINVAL);
  }
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start, 0, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), nullptr, kPage, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start - 1, 64, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), memory.data(), kPage, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start + 2 * kPage - 63, 64, HMR_MADV_WILLNEED),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start, 2 * kPage + 1, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start + kPage, SIZE_MAX, HMR_MADV_WILLNEED),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), start, 0, HMR_MADV_NORMAL), HMR_EINVAL);

  EXPECT_HMR_ERROR(hmr_mem_advise(nullptr, start, kPage, HMR_MADV_WILLNEED), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mem_advise(as<hmr_mr>(domain.get()), start, kPage, HMR_MADV_WILLNEED),
                   HMR_EINVAL);
  EpPtr ep = open_ep(domain.get());
  ASSERT_TRUE(ep);
  EXPECT_HMR_ERROR(hmr_mem_advise(as<hmr_mr>(ep.get()), start, kPage, HMR_MADV_NORMAL),
                   HMR_EINVAL);

  // The exact range is accepted.
  EXPECT_EQ(hmr_mem_advise(mr.get(), start, 2 * kPage, HMR_MADV_WILLNEED), 0) << hmr_last_error();
}

// ============================================================== ofi

using OdpOfi = OfiDomainTest;

TEST_F(OdpOfi, NotAvailableButAdviceOnPinnedMrsSucceeds) {
  for (const hmr_md_op op : {HMR_MD_OP_ODP, HMR_MD_OP_IMPLICIT_ODP, HMR_MD_OP_ADVISE}) {
    expect_unavailable(domain_.get(), op);
  }
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain_.get(), memory_.data(), memory_.size(), kRemote, 0, 0,
                              HMR_MR_ODP, &mr, nullptr),
                   HMR_ENOSYS);
  EXPECT_EQ(mr, sentinel<hmr_mr>()) << "*mr written on failure";

  MrPtr pinned = reg_memory();
  ASSERT_TRUE(pinned);
  EXPECT_EQ(hmr_mem_advise(pinned.get(), memory_.data(), memory_.size(), HMR_MADV_WILLNEED), 0)
      << hmr_last_error();
}

}  // namespace
}  // namespace hmr_memops_test
