// hmr_mr_rereg through the C ABI.  On the sim NIC the MR keeps its handle while its range,
// access or key change; peers reach exactly what the MR covers now; an MR sharing a cached
// registration is detached before it changes; and every refused argument leaves the MR as it
// was.  The ofi NIC has no re-registration and says so.  The contract is hmr.h ("memory
// operations").
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

// Writes `bytes` to (addr, key) and reads them back through the same key.
void expect_round_trip(hmr_ep* initiator, uint64_t addr, uint64_t key,
                       const std::vector<uint8_t>& bytes) {
  ASSERT_HMR_OK(hmr_ep_write(initiator, bytes.data(), bytes.size(), nullptr, addr, key));
  std::vector<uint8_t> back(bytes.size(), 0);
  ASSERT_HMR_OK(hmr_ep_read(initiator, back.data(), back.size(), nullptr, addr, key));
  EXPECT_EQ(back, bytes);
}

// ============================================================== availability

TEST(Rereg, SimDomainsOfferIt) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  EXPECT_EQ(query_op(domain.get(), HMR_MD_OP_REREG).rc, 1);
  DomainPtr offsets = open_domain(0);
  ASSERT_TRUE(offsets);
  EXPECT_EQ(query_op(offsets.get(), HMR_MD_OP_REREG).rc, 1);
}

// ============================================================== translation

TEST(Rereg, TranslationMovesTheMrAndChangesAProviderKey) {
  Pages first(2 * kPage);
  Pages second(3 * kPage);
  std::memset(first.data(), 0x11, first.size());
  std::memset(second.data(), 0x22, second.size());
  LoopbackMr s(open_uncached_domain(kVirtProvKey), first.data(), first.size(), kRemote);
  ASSERT_TRUE(s);
  hmr_mr* const handle = s.mr.get();
  const uint64_t old_key = hmr_mr_key(s.mr.get());
  ASSERT_NE(old_key, HMR_KEY_NOTAVAIL);

  const iovec moved{second.data(), second.size()};
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), &moved, 1));
  EXPECT_EQ(s.mr.get(), handle);
  const uint64_t new_key = hmr_mr_key(s.mr.get());
  EXPECT_NE(new_key, HMR_KEY_NOTAVAIL);
  EXPECT_NE(new_key, old_key) << "a provider key must change with the translation";
  uint64_t base = 0;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(s.mr.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, va(second.data()));

  // The third page exists only in the new range: the MR's length changed too.
  const std::vector<uint8_t> out = pattern(64, 3);
  expect_round_trip(s.initiator(), va(second.data()) + 2 * kPage + 10, new_key, out);
  EXPECT_EQ(std::memcmp(second.data() + 2 * kPage + 10, out.data(), out.size()), 0);
  EXPECT_EQ(second.data()[2 * kPage + 9], 0x22);

  EXPECT_HMR_ERROR(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr,
                                va(second.data()), old_key),
                   HMR_EACCES);
  EXPECT_HMR_ERROR(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr,
                                va(first.data()) + 100, new_key),
                   HMR_EFAULT);
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(first.data()[i], 0x11) << "the old range was written at byte " << i;
  }
  EXPECT_EQ(second.data()[0], 0x22) << "a write through the old key landed";
}

TEST(Rereg, RequestedKeyStaysAndOffsetsFollowTheNewStart) {
  Pages first(kPage);
  Pages second(2 * kPage);
  std::memset(first.data(), 0, first.size());
  std::memset(second.data(), 0, second.size());
  hmr_domain_attr attr;
  LoopbackMr s(open_domain(0, nullptr, &attr), first.data(), first.size(), kRemote, 0x77);
  ASSERT_TRUE(s);
  ASSERT_EQ(attr.mr_mode, 0u) << "the test needs requested keys and offsets";

  const iovec moved{second.data(), second.size()};
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), &moved, 1));
  EXPECT_EQ(hmr_mr_key(s.mr.get()), 0x77u);
  const std::vector<uint8_t> out = pattern(48, 9);
  expect_round_trip(s.initiator(), kPage + 8, 0x77, out);
  EXPECT_EQ(std::memcmp(second.data() + kPage + 8, out.data(), out.size()), 0);
  expect_round_trip(s.initiator(), 0, 0x77, out);
  EXPECT_EQ(std::memcmp(second.data(), out.data(), out.size()), 0);
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(first.data()[i], 0) << "the old range was written at byte " << i;
  }
  EXPECT_HMR_ERROR(hmr_ep_write(s.initiator(), out.data(), 1, nullptr, second.size(), 0x77),
                   HMR_EFAULT);
}

TEST(Rereg, TranslationToSeveralSegments) {
  Pages first(kPage);
  Pages second(kPage);
  std::memset(first.data(), 0, first.size());
  std::memset(second.data(), 0, second.size());
  Pages original(kPage);
  LoopbackMr s(open_domain(0), original.data(), original.size(), kRemote, 0x31);
  ASSERT_TRUE(s);

  // In the opposite order of their addresses, the second one not page aligned.
  const iovec segments[2] = {{second.data(), kPage}, {first.data() + 100, 1000}};
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), segments, 2));
  const std::vector<uint8_t> out = pattern(64, 5);
  expect_round_trip(s.initiator(), kPage - 32, 0x31, out);
  EXPECT_EQ(std::memcmp(second.data() + kPage - 32, out.data(), 32), 0);
  EXPECT_EQ(std::memcmp(first.data() + 100, out.data() + 32, 32), 0);
  EXPECT_EQ(first.data()[99], 0);
  EXPECT_HMR_ERROR(hmr_ep_write(s.initiator(), out.data(), 2, nullptr, kPage + 999, 0x31),
                   HMR_EFAULT);
}

// ============================================================== access

TEST(Rereg, AccessChangeIsEnforcedAtTheTarget) {
  Pages target(kPage);
  std::memset(target.data(), 0x44, target.size());
  LoopbackMr s(open_domain(kVirtProvKey), target.data(), target.size(), kRemote);
  ASSERT_TRUE(s);
  const uint64_t addr = va(target.data()) + 64;
  const uint64_t value = 0x0102030405060708ULL;
  uint64_t sink = 0;

  ASSERT_HMR_OK(rereg_access(s.mr.get(), HMR_REMOTE_READ));
  uint64_t key = hmr_mr_key(s.mr.get());  // it may change: read it again
  EXPECT_HMR_ERROR(hmr_ep_write(s.initiator(), &value, sizeof value, nullptr, addr, key),
                   HMR_EACCES);
  EXPECT_EQ(target.data()[64], 0x44) << "a refused write landed";
  ASSERT_HMR_OK(hmr_ep_read(s.initiator(), &sink, sizeof sink, nullptr, addr, key));
  EXPECT_EQ(sink, 0x4444444444444444ULL);

  ASSERT_HMR_OK(rereg_access(s.mr.get(), HMR_REMOTE_WRITE));
  key = hmr_mr_key(s.mr.get());
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), &value, sizeof value, nullptr, addr, key));
  EXPECT_EQ(std::memcmp(target.data() + 64, &value, sizeof value), 0);
  EXPECT_HMR_ERROR(hmr_ep_read(s.initiator(), &sink, sizeof sink, nullptr, addr, key),
                   HMR_EACCES);
}

TEST(Rereg, TranslationAndAccessInOneCall) {
  Pages first(kPage);
  Pages second(kPage);
  std::memset(second.data(), 0, second.size());
  LoopbackMr s(open_domain(kVirtProvKey), first.data(), first.size(), HMR_REMOTE_READ);
  ASSERT_TRUE(s);

  const iovec moved{second.data(), second.size()};
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.mr_iov = &moved;
  attr.iov_count = 1;
  attr.access = kRemote;
  ASSERT_HMR_OK(hmr_mr_rereg(s.mr.get(), HMR_MR_REREG_TRANSLATION | HMR_MR_REREG_ACCESS, &attr));
  const std::vector<uint8_t> out = pattern(100, 1);
  expect_round_trip(s.initiator(), va(second.data()) + 500, hmr_mr_key(s.mr.get()), out);
  EXPECT_EQ(std::memcmp(second.data() + 500, out.data(), out.size()), 0);
}

// ============================================================== what the sim NIC lacks

TEST(Rereg, SimHasNoProtectionDomains) {
  Pages target(kPage);
  LoopbackMr s(open_domain(0), target.data(), target.size(), kRemote, 0x55);
  ASSERT_TRUE(s);
  int some_object = 0;
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.nic_pd = &some_object;
  EXPECT_HMR_ERROR(hmr_mr_rereg(s.mr.get(), HMR_MR_REREG_PD, &attr), HMR_ENOSYS);
  EXPECT_TRUE(contains(hmr_last_error(), "protection domain")) << hmr_last_error();
  EXPECT_EQ(hmr_mr_key(s.mr.get()), 0x55u);
  const uint32_t value = 0xabcdef01;
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), &value, sizeof value, nullptr, 4, 0x55));
  EXPECT_EQ(std::memcmp(target.data() + 4, &value, sizeof value), 0);
}

TEST(Rereg, CallerDmabufMrIsNotReregistered) {
  const int fd = memfd_create("hmr-rereg-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kPage)), 0) << std::strerror(errno);
  void* view = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(view, MAP_FAILED) << std::strerror(errno);
  {
    DomainPtr domain = open_domain(0);
    ASSERT_TRUE(domain);
    hmr_mr_dmabuf dmabuf = {};
    dmabuf.fd = fd;
    dmabuf.offset = 0;
    dmabuf.len = kPage;
    dmabuf.base_addr = view;
    hmr_mr_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.dmabuf = &dmabuf;
    attr.access = kRemote;
    attr.requested_key = 0xd1;
    attr.iface = HMR_HMEM_SYSTEM;
    hmr_mr* raw_mr = nullptr;
    ASSERT_HMR_OK(hmr_mr_regattr(domain.get(), &attr, HMR_MR_DMABUF, &raw_mr));
    MrPtr mr(raw_mr);
    EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_EOPNOTSUPP);
    EXPECT_EQ(hmr_mr_key(mr.get()), 0xd1u);
  }
  munmap(view, kPage);
  close(fd);
}

// ============================================================== the registration cache

TEST(Rereg, SharedCachedRegistrationIsLeftToTheOtherMr) {
  hmr_domain_attr attr;
  DomainPtr domain = open_domain(kVirtProvKey, nullptr, &attr);
  ASSERT_TRUE(domain);
  if (std::string(attr.cache_monitor) == "disabled") {
    GTEST_SKIP() << "no cache monitor starts here, so no registration is shared";
  }
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  Pages memory(2 * kPage);
  std::memset(memory.data(), 0, memory.size());
  Pages elsewhere(kPage);
  std::memset(elsewhere.data(), 0, elsewhere.size());
  MrPtr kept = reg(domain.get(), memory.data(), memory.size(), kRemote);
  MrPtr moved = reg(domain.get(), memory.data(), memory.size(), kRemote);
  ASSERT_TRUE(kept && moved);
  ASSERT_EQ(query_mr(moved.get()).cached, 1) << "the second registration should be a cache hit";
  const uint64_t shared_key = hmr_mr_key(kept.get());
  ASSERT_EQ(hmr_mr_key(moved.get()), shared_key);

  const iovec target{elsewhere.data(), elsewhere.size()};
  ASSERT_HMR_OK(rereg_translation(moved.get(), &target, 1));
  EXPECT_EQ(query_mr(moved.get()).cached, 0);
  EXPECT_EQ(hmr_mr_key(kept.get()), shared_key);
  const uint64_t moved_key = hmr_mr_key(moved.get());
  EXPECT_NE(moved_key, shared_key);

  const std::vector<uint8_t> out = pattern(32, 7);
  expect_round_trip(link.initiator.get(), va(memory.data()) + kPage, shared_key, out);
  EXPECT_EQ(std::memcmp(memory.data() + kPage, out.data(), out.size()), 0);
  const std::vector<uint8_t> other = pattern(32, 70);
  expect_round_trip(link.initiator.get(), va(elsewhere.data()) + 8, moved_key, other);
  EXPECT_EQ(std::memcmp(elsewhere.data() + 8, other.data(), other.size()), 0);

  // The shared registration outlives the MR that left it.
  moved.reset();
  expect_round_trip(link.initiator.get(), va(memory.data()), shared_key, other);
}

// A domain connected to itself and an MR `mr` of old_buffer that is a cache hit on the
// registration `first` made; `first` is closed again, so the cache alone keeps it.
struct CachedMrAlone {
  hmr_domain_attr attr{};
  DomainPtr domain;
  Link link;
  Pages old_buffer{kPage};
  Pages new_buffer{kPage};
  MrPtr mr;
  uint64_t old_key = 0;

  explicit CachedMrAlone(uint64_t mode) : domain(open_domain(mode, nullptr, &attr)) {
    if (!domain || !caching()) return;
    link = connect(domain.get(), domain.get());
    MrPtr first = reg(domain.get(), old_buffer.data(), kPage, kRemote);
    mr = reg(domain.get(), old_buffer.data(), kPage, kRemote);
    EXPECT_TRUE(first && mr);
    if (mr) {
      EXPECT_EQ(query_mr(mr.get()).cached, 1);
    }
    old_key = mr ? hmr_mr_key(mr.get()) : 0;
  }
  bool caching() const { return std::string(attr.cache_monitor) != "disabled"; }
  explicit operator bool() const { return domain && link && mr; }
};

TEST(Rereg, ACachedRegistrationNobodyElseHoldsLeavesWithTheReregistration) {
  // Verbs' rule: after a new translation the old key no longer reaches the old range.  The
  // cache does not keep a registration the re-registered MR was the last holder of.
  CachedMrAlone s(kVirtProvKey);
  if (s.domain && !s.caching()) GTEST_SKIP() << "no cache monitor here";
  ASSERT_TRUE(s);
  const iovec target{s.new_buffer.data(), kPage};
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), &target, 1));
  const uint8_t byte = 1;
  EXPECT_HMR_ERROR(hmr_ep_write(s.link.initiator.get(), &byte, 1, nullptr,
                                va(s.old_buffer.data()), s.old_key),
                   HMR_EACCES);
  // A new registration of the old range registers again (a miss), with a new key.
  MrPtr again = reg(s.domain.get(), s.old_buffer.data(), kPage, kRemote);
  ASSERT_TRUE(again);
  EXPECT_NE(hmr_mr_key(again.get()), s.old_key);
}

TEST(Rereg, CachedMrMovesOffMemoryThatIsGone) {
  // The usual reason to re-register: the old buffer was freed.  A cached MR gets a registration
  // of the new range directly; the old range is never registered again (ALLOCATED would refuse).
  CachedMrAlone s(kVirtProvKey | HMR_MR_ALLOCATED);
  if (s.domain && !s.caching()) GTEST_SKIP() << "no cache monitor here";
  ASSERT_TRUE(s);
  s.old_buffer.unmap();
  const iovec target{s.new_buffer.data(), kPage};
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), &target, 1));
  EXPECT_EQ(query_mr(s.mr.get()).cached, 0);
  const std::vector<uint8_t> bytes = pattern(64, 3);
  expect_round_trip(s.link.initiator.get(), va(s.new_buffer.data()), hmr_mr_key(s.mr.get()),
                    bytes);
}

TEST(Rereg, AttrSizesNoStructCouldHaveAreRefused) {
  DomainAndMr s(open_uncached_domain(kVirtProvKey), kPage, kRemote);
  ASSERT_TRUE(s);
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.access = HMR_REMOTE_READ;
  attr.size = SIZE_MAX;  // garbage: hmr must not read that far looking for set bytes
  EXPECT_HMR_ERROR(hmr_mr_rereg(s.mr.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  hmr_mw_post post;
  std::memset(&post, 0, sizeof post);
  post.size = 1 << 20;
  hmr_mw* mw = nullptr;
  ASSERT_HMR_OK(hmr_mw_alloc(s.domain.get(), HMR_MW_TYPE_2, &mw));
  EXPECT_HMR_ERROR(hmr_mw_invalidate(mw, &post), HMR_EINVAL);
  EXPECT_EQ(hmr_mw_close(mw), 0) << hmr_last_error();
}

// ============================================================== bad arguments

// A sim MR with a requested key and a connected endpoint, so each test can show that a refused
// re-registration changed nothing.
class ReregBadArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memset(memory_.data(), 0, memory_.size());
    s_ = LoopbackMr(open_domain(0, nullptr, &attr_), memory_.data(), kPage, kRemote, kKey);
    ASSERT_TRUE(s_);
  }
  void TearDown() override {
    if (!s_.mr) return;
    EXPECT_EQ(hmr_mr_key(s_.mr.get()), kKey);
    const std::vector<uint8_t> out = pattern(16, 42);
    ASSERT_HMR_OK(
        hmr_ep_write(s_.initiator(), out.data(), out.size(), nullptr, kPage - 16, kKey));
    EXPECT_EQ(std::memcmp(memory_.data() + kPage - 16, out.data(), out.size()), 0)
        << "the MR no longer covers its original range";
    EXPECT_HMR_ERROR(
        hmr_ep_write(s_.initiator(), out.data(), out.size(), nullptr, kPage, kKey),
        HMR_EFAULT);
  }

  static constexpr uint64_t kKey = 0x42;
  Pages memory_{2 * kPage};
  hmr_domain_attr attr_{};
  LoopbackMr s_;
};

TEST_F(ReregBadArgs, Flags) {
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.access = HMR_REMOTE_READ;
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), 0, &attr), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), 1ULL << 3, &attr), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS | (1ULL << 63), &attr),
                   HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS | HMR_REMOTE_WRITE, &attr),
                   HMR_EBADFLAGS);
}

TEST_F(ReregBadArgs, AttrPointerAndSize) {
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS, nullptr), HMR_EINVAL);
  for (const size_t size : {size_t{0}, sizeof(size_t), sizeof(hmr_mr_rereg_attr) - 1}) {
    SCOPED_TRACE("attr.size " + std::to_string(size));
    hmr_mr_rereg_attr attr = rereg_attr();
    attr.access = kRemote;
    attr.size = size;
    EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  }
  // A newer, longer struct: refused while a byte this hmr does not know is set.
  struct Longer {
    hmr_mr_rereg_attr attr;
    uint64_t unknown;
  } longer;
  std::memset(&longer, 0, sizeof longer);
  longer.attr.size = sizeof longer;
  longer.attr.access = kRemote;
  longer.unknown = 1;
  EXPECT_HMR_ERROR(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS, &longer.attr), HMR_EINVAL);
  longer.unknown = 0;
  EXPECT_EQ(hmr_mr_rereg(s_.mr.get(), HMR_MR_REREG_ACCESS, &longer.attr), 0) << hmr_last_error();
}

TEST_F(ReregBadArgs, Translation) {
  Pages other(8 * kPage);
  void* const near_top = reinterpret_cast<void*>(UINTPTR_MAX - kPage + 1);
  const iovec good{other.data(), kPage};
  const iovec empty{other.data(), 0};
  const iovec null_base{nullptr, kPage};
  const iovec wraps{near_top, 2 * kPage};
  const iovec mixed[2] = {{other.data(), kPage}, {other.data() + 2 * kPage, 0}};

  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), nullptr, 1), HMR_EINVAL);
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), &good, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), &empty, 1), HMR_EINVAL);
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), &null_base, 1), HMR_EINVAL);
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), &wraps, 1), HMR_EINVAL);
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), mixed, 2), HMR_EINVAL);

  ASSERT_LT(attr_.mr_iov_limit, 8u) << "the test needs an iov limit below 8";
  std::vector<iovec> too_many;
  for (size_t i = 0; i <= attr_.mr_iov_limit; ++i) {
    too_many.push_back({other.data() + i * kPage, 64});
  }
  EXPECT_HMR_ERROR(rereg_translation(s_.mr.get(), too_many.data(), too_many.size()), HMR_EINVAL);
}

TEST_F(ReregBadArgs, Access) {
  const uint64_t kRefused[] = {0, 1, 1ULL << 20, 1ULL << 63, HMR_REMOTE_READ | (1ULL << 30)};
  for (const uint64_t access : kRefused) {
    SCOPED_TRACE("access " + std::to_string(access));
    EXPECT_HMR_ERROR(rereg_access(s_.mr.get(), access), HMR_EINVAL);
  }
}

TEST_F(ReregBadArgs, NotAnMr) {
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.access = HMR_REMOTE_READ;
  EXPECT_HMR_ERROR(hmr_mr_rereg(nullptr, HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_rereg(as<hmr_mr>(s_.domain.get()), HMR_MR_REREG_ACCESS, &attr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_rereg(as<hmr_mr>(s_.link.target.get()), HMR_MR_REREG_ACCESS, &attr),
                   HMR_EINVAL);
  MwPtr window = alloc_window(s_.domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  EXPECT_HMR_ERROR(hmr_mr_rereg(as<hmr_mr>(window.get()), HMR_MR_REREG_ACCESS, &attr),
                   HMR_EINVAL);
}

// ============================================================== ofi

using ReregOfi = OfiDomainTest;

TEST_F(ReregOfi, NotAvailable) {
  expect_unavailable(domain_.get(), HMR_MD_OP_REREG);

  MrPtr mr = reg_memory();
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_ENOSYS);
  Pages other(kPage);
  const iovec moved{other.data(), other.size()};
  EXPECT_HMR_ERROR(rereg_translation(mr.get(), &moved, 1), HMR_ENOSYS);
  EXPECT_EQ(hmr_mr_key(mr.get()), key);
}

}  // namespace
}  // namespace hmr_memops_test
