// Indirect keys through the C ABI on the sim NIC: one key over ranges of MRs already
// registered, addressed from 0 whatever the domain's addressing, so that one RMA may span
// several MRs and land in each in order; the MRs under an open indirect key cannot close or
// change; the key packs and unpacks like any other.  Every bad argument is refused (naming
// the bad segment); the ofi NIC has no indirect keys.  The contract is hmr.h ("memory
// operations").
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

hmr_mr* reg_indirect(hmr_domain* domain, const std::vector<hmr_mr_segment>& segments,
                     uint64_t access) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg_indirect(domain, segments.data(), segments.size(), access, &mr);
  EXPECT_EQ(rc, 0) << "hmr_mr_reg_indirect: " << hmr_last_error();
  return rc == 0 ? mr : nullptr;
}

// Expects -code with *mr untouched.
void expect_indirect_error(hmr_domain* domain, const hmr_mr_segment* segments, size_t count,
                           uint64_t access, int code) {
  hmr_mr* mr = sentinel<hmr_mr>();
  const int rc = hmr_mr_reg_indirect(domain, segments, count, access, &mr);
  EXPECT_EQ(rc, -code) << hmr_last_error();
  if (rc < 0) {
    EXPECT_STRNE(hmr_last_error(), "");
    EXPECT_EQ(mr, sentinel<hmr_mr>()) << "*mr written on failure";
  } else if (mr != nullptr && mr != sentinel<hmr_mr>()) {
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
}

// Whether a reason names segment `index` the way people write it.
bool names_segment(const std::string& reason, size_t index) {
  const std::string i = std::to_string(index);
  for (const std::string& form :
       {"segment " + i, "segments[" + i + "]", "segment[" + i + "]", "segment #" + i}) {
    if (contains(reason, form)) return true;
  }
  return false;
}

// Two MRs of separate buffers, and an indirect key over [a + 1000, +3000) then [b, +2000).
struct TwoMrs {
  static constexpr size_t kFirstOffset = 1000;
  static constexpr size_t kFirstLen = 3000;
  static constexpr size_t kSecondLen = 2000;
  static constexpr size_t kTotal = kFirstLen + kSecondLen;

  Pages a{kPage};
  Pages b{kPage};
  MrPtr first;
  MrPtr second;

  explicit TwoMrs(hmr_domain* domain, uint64_t access = kRemote) {
    std::memset(a.data(), 0, a.size());
    std::memset(b.data(), 0, b.size());
    if (domain == nullptr) return;  // the failure to open it is recorded already
    first = reg(domain, a.data(), a.size(), access, 0xa1);
    second = reg(domain, b.data(), b.size(), access, 0xb2);
  }
  explicit operator bool() const { return first && second; }
  std::vector<hmr_mr_segment> segments() const {
    return {{first.get(), a.data() + kFirstOffset, kFirstLen},
            {second.get(), b.data(), kSecondLen}};
  }
};

// A sim domain (`opened`) connected to itself, TwoMrs in it and an indirect key over them with
// `key_access`: where the tests of what the key reaches start.
struct KeyOverTwoMrs {
  DomainPtr domain;
  Link link;
  TwoMrs mrs;
  MrPtr indirect;

  KeyOverTwoMrs(DomainPtr opened, uint64_t key_access)
      : domain(std::move(opened)),
        link(domain ? connect(domain.get(), domain.get()) : Link{}),
        mrs(domain.get()) {
    if (link && mrs) indirect.reset(reg_indirect(domain.get(), mrs.segments(), key_access));
  }
  explicit operator bool() const { return domain && link && mrs && indirect; }
  hmr_ep* initiator() const { return link.initiator.get(); }
  uint64_t key() const { return hmr_mr_key(indirect.get()); }
};

// ============================================================== availability

TEST(IndirectKey, SimDomainsOfferIt) {
  DomainPtr virt = open_domain(kVirtProvKey);
  DomainPtr offsets = open_domain(0);
  ASSERT_TRUE(virt && offsets);
  EXPECT_EQ(query_op(virt.get(), HMR_MD_OP_INDIRECT).rc, 1);
  EXPECT_EQ(query_op(offsets.get(), HMR_MD_OP_INDIRECT).rc, 1);
}

// ============================================================== one RMA over several MRs

void expect_rma_spans_both_mrs(uint64_t app_mode, const char* options) {
  hmr_domain_attr attr;
  KeyOverTwoMrs s(open_domain(app_mode, options, &attr), kRemote);
  SCOPED_TRACE((attr.mr_mode & HMR_MR_VIRT_ADDR) ? "VIRT_ADDR domain" : "offset domain");
  ASSERT_TRUE(s);
  const TwoMrs& mrs = s.mrs;
  hmr_ep* const initiator = s.initiator();
  const uint64_t key = s.key();
  ASSERT_NE(key, HMR_KEY_NOTAVAIL);
  EXPECT_NE(key, hmr_mr_key(mrs.first.get()));
  EXPECT_NE(key, hmr_mr_key(mrs.second.get()));
  uint64_t base = 1;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(s.indirect.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, 0u);

  // 100 bytes at the end of the first segment, 100 at the start of the second.
  const std::vector<uint8_t> out = pattern(200, 11);
  const uint64_t boundary = TwoMrs::kFirstLen;
  ASSERT_HMR_OK(
      hmr_ep_write(initiator, out.data(), out.size(), nullptr, boundary - 100, key));
  EXPECT_EQ(std::memcmp(mrs.a.data() + 3900, out.data(), 100), 0);
  EXPECT_EQ(std::memcmp(mrs.b.data(), out.data() + 100, 100), 0);
  EXPECT_EQ(mrs.a.data()[3899], 0);
  EXPECT_EQ(mrs.b.data()[100], 0);
  std::vector<uint8_t> in(out.size(), 0);
  ASSERT_HMR_OK(
      hmr_ep_read(initiator, in.data(), in.size(), nullptr, boundary - 100, key));
  EXPECT_EQ(in, out);

  // The first and the last byte, and nothing past the total.
  const uint8_t first_byte = 0xf1;
  const uint8_t last_byte = 0xf2;
  ASSERT_HMR_OK(hmr_ep_write(initiator, &first_byte, 1, nullptr, 0, key));
  ASSERT_HMR_OK(
      hmr_ep_write(initiator, &last_byte, 1, nullptr, TwoMrs::kTotal - 1, key));
  EXPECT_EQ(mrs.a.data()[TwoMrs::kFirstOffset], 0xf1);
  EXPECT_EQ(mrs.b.data()[TwoMrs::kSecondLen - 1], 0xf2);
  EXPECT_EQ(mrs.b.data()[TwoMrs::kSecondLen], 0);
  EXPECT_HMR_ERROR(hmr_ep_write(initiator, out.data(), 1, nullptr, TwoMrs::kTotal, key),
                   HMR_EFAULT);
  EXPECT_HMR_ERROR(
      hmr_ep_write(initiator, out.data(), 2, nullptr, TwoMrs::kTotal - 1, key),
      HMR_EFAULT);
  EXPECT_EQ(mrs.b.data()[TwoMrs::kSecondLen - 1], 0xf2) << "a refused write landed";
  // Addresses of the memory are not the indirect key's addresses.
  EXPECT_HMR_ERROR(hmr_ep_write(initiator, out.data(), 8, nullptr,
                                va(mrs.a.data()) + TwoMrs::kFirstOffset, key),
                   HMR_EFAULT);
}

TEST(IndirectKey, OneRmaSpansTwoMrsInVirtAddrDomains) {
  expect_rma_spans_both_mrs(kVirtProvKey, nullptr);
}

TEST(IndirectKey, OneRmaSpansTwoMrsInOffsetDomains) { expect_rma_spans_both_mrs(0, nullptr); }

TEST(IndirectKey, SegmentsKeepTheGivenOrder) {
  constexpr size_t kSegments = 256;  // the most one key may have
  constexpr size_t kPiece = kPage / kSegments;
  Pages memory(kPage);
  std::memset(memory.data(), 0, memory.size());
  LoopbackMr s(open_domain(kVirtProvKey), memory.data(), memory.size(), kRemote);
  ASSERT_TRUE(s);
  // Piece i of the key is piece (255 - i) of the memory.
  std::vector<hmr_mr_segment> segments;
  for (size_t i = 0; i < kSegments; ++i) {
    segments.push_back({s.mr.get(), memory.data() + (kSegments - 1 - i) * kPiece, kPiece});
  }
  MrPtr indirect(reg_indirect(s.domain.get(), segments, kRemote));
  ASSERT_TRUE(indirect);

  const std::vector<uint8_t> out = pattern(kPage, 21);
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr, 0,
                             hmr_mr_key(indirect.get())));
  for (size_t i = 0; i < kPage; ++i) {
    const size_t piece = i / kPiece;
    const size_t landed = (kSegments - 1 - piece) * kPiece + i % kPiece;
    ASSERT_EQ(memory.data()[landed], out[i]) << "byte " << i << " of the write";
  }
  std::vector<uint8_t> in(out.size(), 0);
  ASSERT_HMR_OK(hmr_ep_read(s.initiator(), in.data(), in.size(), nullptr, 0,
                            hmr_mr_key(indirect.get())));
  EXPECT_EQ(in, out);

  segments.push_back(segments.front());
  expect_indirect_error(s.domain.get(), segments.data(), segments.size(), kRemote, HMR_EINVAL);
}

TEST(IndirectKey, AnAtomicLiesWithinOneSegment) {
  KeyOverTwoMrs s(open_domain(kVirtProvKey), kRemote);
  ASSERT_TRUE(s);
  // A key whose first segment is 100 bytes: the aligned 8 bytes at 96 straddle the boundary.
  const std::vector<hmr_mr_segment> segments = {{s.mrs.first.get(), s.mrs.a.data(), 100},
                                                {s.mrs.second.get(), s.mrs.b.data(), 100}};
  MrPtr key(reg_indirect(s.domain.get(), segments, kRemote));
  ASSERT_TRUE(key);
  uint64_t result = 99;
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(s.initiator(), 1, &result, 96, hmr_mr_key(key.get())),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "segments")) << hmr_last_error();
  EXPECT_EQ(result, 99u);
  // Inside either segment: done, in the memory that segment names.
  ASSERT_HMR_OK(hmr_ep_fetch_add(s.initiator(), 5, &result, 88, hmr_mr_key(key.get())));
  EXPECT_EQ(result, 0u);
  ASSERT_HMR_OK(hmr_ep_fetch_add(s.initiator(), 7, &result, 104, hmr_mr_key(key.get())));
  EXPECT_EQ(result, 0u);
  uint64_t landed = 0;
  std::memcpy(&landed, s.mrs.b.data() + 4, sizeof landed);
  EXPECT_EQ(landed, 7u);
}

// ============================================================== access

TEST(IndirectKey, AccessIsTheIndirectKeysAndNeedsTheMrsGrant) {
  KeyOverTwoMrs readable(open_domain(kVirtProvKey), HMR_REMOTE_READ);
  ASSERT_TRUE(readable);
  const uint64_t value = 0x0badc0de;
  EXPECT_HMR_ERROR(
      hmr_ep_write(readable.initiator(), &value, sizeof value, nullptr, 0, readable.key()),
      HMR_EACCES);
  EXPECT_EQ(readable.mrs.a.data()[TwoMrs::kFirstOffset], 0) << "a refused write landed";
  uint64_t sink = 1;
  ASSERT_HMR_OK(hmr_ep_read(readable.initiator(), &sink, sizeof sink, nullptr, 0, readable.key()));
  EXPECT_EQ(sink, 0u);

  hmr_domain* const domain = readable.domain.get();
  TwoMrs read_only(domain, HMR_REMOTE_READ);
  ASSERT_TRUE(read_only);
  const std::vector<hmr_mr_segment> segments = read_only.segments();
  expect_indirect_error(domain, segments.data(), segments.size(), kRemote, HMR_EACCES);
  expect_indirect_error(domain, segments.data(), segments.size(), HMR_REMOTE_WRITE, HMR_EACCES);
}

// ============================================================== the MRs underneath

TEST(IndirectKey, MrsUnderAnOpenKeyCannotCloseOrChange) {
  KeyOverTwoMrs s(open_domain(kVirtProvKey), kRemote);
  ASSERT_TRUE(s);
  TwoMrs& mrs = s.mrs;

  if (!expect_close_busy(mrs.second)) return;
  EXPECT_HMR_ERROR(rereg_access(mrs.first.get(), HMR_REMOTE_READ), HMR_EBUSY);
  // The refusals changed nothing: the indirect key still reaches both MRs.
  const std::vector<uint8_t> out = pattern(16, 8);
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr,
                             TwoMrs::kFirstLen - 8, s.key()));
  EXPECT_EQ(std::memcmp(mrs.b.data(), out.data() + 8, 8), 0);

  ASSERT_HMR_OK(hmr_mr_close(s.indirect.release()));
  ASSERT_HMR_OK(rereg_access(mrs.first.get(), HMR_REMOTE_READ));
  ASSERT_HMR_OK(hmr_mr_close(mrs.second.release()));
}

// ============================================================== packed remote keys

TEST(IndirectKey, PackedKeyRoundTripsToAnotherDomain) {
  DomainPtr target_domain = open_domain(kVirtProvKey);
  DomainPtr initiator_domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(target_domain && initiator_domain);
  TwoMrs mrs(target_domain.get());
  ASSERT_TRUE(mrs);
  MrPtr indirect(reg_indirect(target_domain.get(), mrs.segments(), kRemote));
  ASSERT_TRUE(indirect);

  std::vector<uint8_t> blob(HMR_RKEY_PACKED_MAX);
  size_t len = blob.size();
  ASSERT_HMR_OK(hmr_rkey_pack(indirect.get(), blob.data(), &len));
  hmr_rkey* rkey = nullptr;
  ASSERT_HMR_OK(hmr_rkey_unpack(initiator_domain.get(), blob.data(), len, &rkey));
  hmr_rkey_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  const int query_rc = hmr_rkey_query(rkey, &info);
  EXPECT_EQ(query_rc, 0) << hmr_last_error();
  EXPECT_EQ(info.addr, 0u);
  EXPECT_EQ(info.length, TwoMrs::kTotal);
  EXPECT_EQ(info.key, hmr_mr_key(indirect.get()));
  EXPECT_EQ(info.iface, HMR_HMEM_SYSTEM);

  if (query_rc == 0) {
    Link link = connect(initiator_domain.get(), target_domain.get());
    ASSERT_TRUE(link);
    const std::vector<uint8_t> out = pattern(64, 30);
    EXPECT_EQ(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr,
                           info.addr + TwoMrs::kFirstLen - 32, info.key),
              0)
        << hmr_last_error();
    EXPECT_EQ(std::memcmp(mrs.a.data() + 3968, out.data(), 32), 0);
    EXPECT_EQ(std::memcmp(mrs.b.data(), out.data() + 32, 32), 0);
  }
  EXPECT_EQ(hmr_rkey_release(rkey), 0) << hmr_last_error();
}

// ============================================================== bad arguments

// A sim domain and TwoMrs in it, whose segments are good ones.
class IndirectBadArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    domain_ = open_domain(kVirtProvKey);
    ASSERT_TRUE(domain_);
    mrs_ = std::make_unique<TwoMrs>(domain_.get());
    ASSERT_TRUE(*mrs_);
    segments_ = mrs_->segments();
  }

  DomainPtr domain_;
  std::unique_ptr<TwoMrs> mrs_;
  std::vector<hmr_mr_segment> segments_;
};

TEST_F(IndirectBadArgs, DomainSegmentsAndOutput) {
  expect_indirect_error(nullptr, segments_.data(), segments_.size(), kRemote, HMR_EINVAL);
  expect_indirect_error(as<hmr_domain>(mrs_->first.get()), segments_.data(), segments_.size(),
                        kRemote, HMR_EINVAL);
  expect_indirect_error(domain_.get(), nullptr, 2, kRemote, HMR_EINVAL);
  expect_indirect_error(domain_.get(), segments_.data(), 0, kRemote, HMR_EINVAL);
  EXPECT_HMR_ERROR(
      hmr_mr_reg_indirect(domain_.get(), segments_.data(), segments_.size(), kRemote, nullptr),
      HMR_EINVAL);
}

TEST_F(IndirectBadArgs, Access) {
  const uint64_t kRefused[] = {0, 1ULL << 40, 1ULL << 63, HMR_REMOTE_READ | (1ULL << 30)};
  for (const uint64_t access : kRefused) {
    SCOPED_TRACE("access " + std::to_string(access));
    expect_indirect_error(domain_.get(), segments_.data(), segments_.size(), access, HMR_EINVAL);
  }
}

// Each bad segment is at index 1, after a good one; the reason must say which it is.
class IndirectBadSegment : public IndirectBadArgs {
 protected:
  void expect_second_segment_refused(const hmr_mr_segment& bad, int code = HMR_EINVAL) {
    const hmr_mr_segment segments[2] = {mrs_->segments()[0], bad};
    expect_indirect_error(domain_.get(), segments, 2, kRemote, code);
    EXPECT_TRUE(names_segment(hmr_last_error(), 1)) << "reason: " << hmr_last_error();
  }
  hmr_mr* second() const { return mrs_->second.get(); }
  uint8_t* b() const { return mrs_->b.data(); }
};

TEST_F(IndirectBadSegment, NoMr) { expect_second_segment_refused({nullptr, b(), 64}); }

TEST_F(IndirectBadSegment, NotAnMr) {
  expect_second_segment_refused({as<hmr_mr>(domain_.get()), b(), 64});
  MwPtr window = alloc_window(domain_.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  expect_second_segment_refused({as<hmr_mr>(window.get()), b(), 64});
}

TEST_F(IndirectBadSegment, MrOfAnotherDomain) {
  DomainPtr other = open_domain(kVirtProvKey);
  ASSERT_TRUE(other);
  MrPtr foreign = reg(other.get(), b(), kPage, kRemote);
  ASSERT_TRUE(foreign);
  expect_second_segment_refused({foreign.get(), b(), 64});
}

TEST_F(IndirectBadSegment, RangeOutsideItsMr) {
  expect_second_segment_refused({second(), b(), 0});
  expect_second_segment_refused({second(), nullptr, 64});
  expect_second_segment_refused({second(), b() - 1, 64});
  expect_second_segment_refused({second(), b() + kPage - 63, 64});
  expect_second_segment_refused({second(), b() + kPage, 1});
  expect_second_segment_refused({second(), b(), kPage + 1});
  expect_second_segment_refused({second(), b() + 8, SIZE_MAX});
  // The first MR's memory named with the second MR.
  expect_second_segment_refused({second(), mrs_->a.data(), 64});
}

TEST_F(IndirectBadSegment, AnotherIndirectKey) {
  MrPtr indirect(reg_indirect(domain_.get(), segments_, kRemote));
  ASSERT_TRUE(indirect);
  expect_second_segment_refused({indirect.get(), nullptr, 64});
  expect_second_segment_refused({indirect.get(), b(), 64});
}

// ============================================================== ofi

using IndirectKeyOfi = OfiDomainTest;

TEST_F(IndirectKeyOfi, NotAvailable) {
  expect_unavailable(domain_.get(), HMR_MD_OP_INDIRECT);
  MrPtr mr = reg_memory();
  ASSERT_TRUE(mr);
  const hmr_mr_segment segments[2] = {{mr.get(), memory_.data(), 100},
                                      {mr.get(), memory_.data() + 200, 100}};
  expect_indirect_error(domain_.get(), segments, 2, kRemote, HMR_ENOSYS);
}

}  // namespace
}  // namespace hmr_memops_test
