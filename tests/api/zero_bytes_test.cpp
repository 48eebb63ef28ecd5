// Zero bytes and no access (docs/semantics.md, "Zero bytes and no access"): libfabric registers
// both (fi_mr(3): access is an OR of the flags, none forbidden; its providers take a length of
// 0; fabtests' unit/mr_test.c registers every access combination, none included), and so does
// hmr, through every NIC that takes them.  What such an MR permits: nothing a peer can reach.
#include <sys/mman.h>
#include <sys/uio.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"

using namespace hmr_test;

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kAllAccess =
    HMR_SEND | HMR_RECV | HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;

hmr_domain_stats stats_of(hmr_domain* domain) {
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

TEST(ZeroBytesAndNoAccess, RegisterOnTheSimNicCachedOrNot) {
  for (const char* monitor : {"disabled", "default"}) {
    SCOPED_TRACE(monitor);
    hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
    attr.cache_monitor = monitor;
    hmr_domain* raw = nullptr;
    ASSERT_EQ(hmr_domain_open(&attr, &raw), 0) << hmr_last_error();
    DomainPtr domain(raw);
    Pages pages(2 * kPage);
    std::memset(pages.data(), 0, 2 * kPage);
    {
      MrPtr empty = reg(domain.get(), pages.data(), 0, kAllAccess);
      MrPtr empty_at_null = reg(domain.get(), nullptr, 0, kAllAccess);
      MrPtr no_access = reg(domain.get(), pages.data(), kPage, 0);
      ASSERT_TRUE(empty && empty_at_null && no_access);
      EXPECT_NE(hmr_mr_key(empty.get()), HMR_KEY_NOTAVAIL);
      EXPECT_NE(hmr_mr_key(no_access.get()), HMR_KEY_NOTAVAIL);
      hmr_mr_info info{};
      info.size = sizeof info;
      ASSERT_EQ(hmr_mr_query(empty_at_null.get(), &info), 0) << hmr_last_error();
      EXPECT_EQ(info.iface, HMR_HMEM_SYSTEM);
      EXPECT_EQ(info.cached, 0) << "zero bytes are never cached";

      // A peer reaches neither: no byte lies in the empty MR, and the other grants no access.
      Link link = connect(domain.get(), domain.get());
      ASSERT_TRUE(link);
      const uint8_t byte = 7;
      EXPECT_NE(hmr_ep_write(link.initiator.get(), &byte, 1, nullptr,
                             reinterpret_cast<uint64_t>(pages.data()), hmr_mr_key(empty.get())),
                0);
      EXPECT_EQ(hmr_ep_write(link.initiator.get(), &byte, 1, nullptr,
                             reinterpret_cast<uint64_t>(pages.data()),
                             hmr_mr_key(no_access.get())),
                -HMR_EACCES)
          << hmr_last_error();
      EXPECT_EQ(pages.data()[0], 0) << "a byte reached an MR that grants nothing";

      // Its packed key unpacks (an exchange of every rank's keys includes it): a key of zero
      // bytes.  Unpacking refused the packed range as empty.
      std::vector<uint8_t> blob(HMR_RKEY_PACKED_MAX);
      size_t blob_size = blob.size();
      ASSERT_EQ(hmr_rkey_pack(empty.get(), blob.data(), &blob_size), 0) << hmr_last_error();
      hmr_rkey* rkey = nullptr;
      ASSERT_EQ(hmr_rkey_unpack(domain.get(), blob.data(), blob_size, &rkey), 0) << hmr_last_error();
      hmr_rkey_info rinfo{};
      rinfo.size = sizeof rinfo;
      ASSERT_EQ(hmr_rkey_query(rkey, &rinfo), 0) << hmr_last_error();
      EXPECT_EQ(rinfo.length, 0u);
      EXPECT_EQ(rinfo.key, hmr_mr_key(empty.get()));
      EXPECT_EQ(hmr_rkey_release(rkey), 0) << hmr_last_error();
    }
    const hmr_domain_stats stats = stats_of(domain.get());
    EXPECT_EQ(stats.mr_open, 0u);
    EXPECT_EQ(stats.nic_registrations, stats.nic_deregistrations + stats.cache_regions);
  }
}

struct Seen {
  std::vector<size_t> lengths;
  std::vector<uint64_t> accesses;
};

int remember(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char*, size_t) {
  auto* seen = static_cast<Seen*>(context);
  seen->lengths.push_back(request->len);
  seen->accesses.push_back(request->access);
  mr->handle = seen;
  mr->key = seen->lengths.size();
  return 0;
}

int forget(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

// The callback NIC is asked as libfabric's providers are: with the length 0 and the access 0.
TEST(ZeroBytesAndNoAccess, ReachTheCallbackNicAsGiven) {
  Seen seen;
  hmr_nic_callbacks callbacks{};
  callbacks.size = sizeof callbacks;
  callbacks.context = &seen;
  callbacks.key_size = 8;
  callbacks.reg_va = remember;
  callbacks.dereg = forget;
  hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  attr.nic = "callback";
  attr.nic_handle = &callbacks;
  hmr_domain* raw = nullptr;
  ASSERT_EQ(hmr_domain_open(&attr, &raw), 0) << hmr_last_error();
  DomainPtr domain(raw);
  Pages pages(kPage);
  {
    MrPtr empty = reg(domain.get(), pages.data(), 0, HMR_REMOTE_READ);
    MrPtr no_access = reg(domain.get(), pages.data(), kPage, 0);
    ASSERT_TRUE(empty && no_access);
  }
  ASSERT_EQ(seen.lengths.size(), 2u);
  EXPECT_EQ(seen.lengths[0], 0u);
  EXPECT_EQ(seen.accesses[0], HMR_REMOTE_READ);
  EXPECT_EQ(seen.lengths[1], kPage);
  EXPECT_EQ(seen.accesses[1], 0u);
}

// Zero bytes wherever libfabric takes them (a review's findings): as a segment of a vector
// beside others (each was refused, "memory query ... empty range"), declared SYSTEM in a
// domain that offered HMR_MR_HMEM (the same), and at an unaligned address of an unmapped page
// in an HMR_MR_ALLOCATED domain (refused as unmapped: its check looked at the bytes before it).
TEST(ZeroBytesAndNoAccess, EmptySegmentsDeclaredMemoryAndUnmappedAddresses) {
  Pages pages(2 * kPage);
  std::memset(pages.data(), 1, 2 * kPage);
  hmr_mr* mr = nullptr;
  {
    DomainPtr vectors = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR, "iov_limit=4");
    ASSERT_TRUE(vectors);
    const iovec empty_first[2] = {{pages.data(), 0}, {pages.data() + kPage, kPage}};
    const iovec empty_last[2] = {{pages.data(), kPage}, {nullptr, 0}};
    for (const iovec* iov : {empty_first, empty_last}) {
      ASSERT_EQ(hmr_mr_regv(vectors.get(), iov, 2, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr), 0)
          << hmr_last_error();
      hmr_mr_info info{};
      info.size = sizeof info;
      EXPECT_EQ(hmr_mr_query(mr, &info), 0) << hmr_last_error();
      EXPECT_EQ(info.iface, HMR_HMEM_SYSTEM);
      EXPECT_EQ(hmr_mr_close(mr), 0);
    }
  }
  {
    DomainPtr declaring = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_HMEM);
    ASSERT_TRUE(declaring);
    for (const void* where : {static_cast<const void*>(pages.data()), static_cast<const void*>(nullptr)}) {
      ASSERT_EQ(hmr_mr_reg(declaring.get(), where, 0, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr), 0)
          << hmr_last_error();
      EXPECT_EQ(hmr_mr_close(mr), 0);
    }
  }
  {
    DomainPtr allocated = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED,
                                      "require=ALLOCATED|PROV_KEY|VIRT_ADDR");
    ASSERT_TRUE(allocated);
    void* hole = mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    ASSERT_EQ(munmap(hole, kPage), 0);
    for (const size_t offset : {size_t{0}, size_t{100}}) {
      ASSERT_EQ(hmr_mr_reg(allocated.get(), static_cast<char*>(hole) + offset, 0, HMR_REMOTE_READ,
                           0, 0, 0, &mr, nullptr),
                0)
          << offset << ": " << hmr_last_error();
      EXPECT_EQ(hmr_mr_close(mr), 0);
    }
    EXPECT_EQ(hmr_mr_reg(allocated.get(), static_cast<char*>(hole) + 100, 1, HMR_REMOTE_READ, 0,
                         0, 0, &mr, nullptr),
              -HMR_EFAULT)
        << "one byte there is unmapped memory";
  }
}

}  // namespace
