// Memory windows through the C ABI on the sim NIC: a window's key reaches exactly the bound
// part of its MR with exactly the window's access, rebinding (type 1) or invalidation makes
// the old key dead, a type 2 window must be invalidated before it binds again, and a bound
// window keeps its MR from closing or changing.  Every bad argument is refused with its
// output untouched; the ofi NIC and RAW-key sim domains have no windows.  The contract is
// hmr.h ("memory operations").
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "memory_ops_raw_enum_calls.h"
#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

constexpr uint64_t kBindable = kRemote | HMR_MW_BIND;

// Target pages filled with `fill`; a base of WindowOnTarget so that they are unmapped last.
struct FilledTarget {
  Pages target;
  FilledTarget(size_t bytes, uint8_t fill) : target(bytes) {
    std::memset(target.data(), fill, target.size());
  }
};

// Where most tests here start: a filled target, a sim domain (`opened`) connected to itself, a
// bindable MR over the target from `mr_offset` to its end, and one unbound window of `type`.
struct WindowOnTarget : FilledTarget, LoopbackMr {
  MwPtr window;

  WindowOnTarget(size_t bytes, uint8_t fill, hmr_mw_type type,
                 DomainPtr opened = open_domain(kVirtProvKey), size_t mr_offset = 0)
      : FilledTarget(bytes, fill),
        LoopbackMr(std::move(opened), target.data() + mr_offset, bytes - mr_offset, kBindable) {
    if (mr) window = alloc_window(domain.get(), type);
  }
  explicit operator bool() const { return LoopbackMr::operator bool() && window; }

  // The address of target byte `offset` in a VIRT_ADDR domain.
  uint64_t at(size_t offset) const { return va(target.data()) + offset; }
  // Binds the window to [target + offset, +len); its key, or kKeySentinel on failure.
  uint64_t bind(size_t offset, size_t len, uint64_t access = kRemote) const {
    return bind_window(window.get(), mr.get(), target.data() + offset, len, access);
  }
  // Writes `value` to target byte `offset` through `key`: success when it landed there.
  ::testing::AssertionResult write_lands(size_t offset, uint64_t key, uint64_t value) const {
    if (hmr_ep_write(initiator(), &value, sizeof value, nullptr, at(offset), key) != 0) {
      return ::testing::AssertionFailure() << "hmr_ep_write: " << hmr_last_error();
    }
    if (std::memcmp(target.data() + offset, &value, sizeof value) != 0) {
      return ::testing::AssertionFailure() << "the write did not land at byte " << offset;
    }
    return ::testing::AssertionSuccess();
  }
  // Expects a write of `len` bytes to (addr, key) to fail with `code` and to move nothing.
  void expect_write_refused(uint64_t addr, uint64_t key, size_t len, int code) const {
    const std::vector<uint8_t> before(target.data(), target.data() + target.size());
    const std::vector<uint8_t> out = pattern(len, 0x90);
    EXPECT_HMR_ERROR(hmr_ep_write(initiator(), out.data(), out.size(), nullptr, addr, key), code);
    EXPECT_EQ(std::memcmp(before.data(), target.data(), before.size()), 0)
        << "a refused write changed the target";
  }
};

// ============================================================== availability

TEST(MemoryWindow, SimDomainsHaveThemRawKeyDomainsDoNot) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  EXPECT_EQ(query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS).rc, 1);

  DomainPtr raw = open_domain(kVirtProvKey | HMR_MR_RAW, "require=RAW;key_size=16");
  ASSERT_TRUE(raw);
  expect_unavailable(raw.get(), HMR_MD_OP_MEMORY_WINDOWS);
  for (const hmr_mw_type type : {HMR_MW_TYPE_1, HMR_MW_TYPE_2}) {
    expect_alloc_window_refused(raw.get(), type, HMR_ENOSYS);
  }
}

// A window's key is the NIC's choice, as wide as its keys: a domain whose mr_key_size is
// narrower (keys the application requests) has no windows, and hmr_md_query_op says so with
// the reason hmr_mw_alloc gives (-HMR_ENOSYS).  The query said "available" and the alloc then
// failed with -HMR_EINVAL (found by a review).
TEST(MemoryWindow, ADomainOfNarrowerKeysHasNone) {
  hmr_domain_attr attr = domain_attr(HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED, nullptr);
  attr.mr_key_size = 4;
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr narrow(raw);
  expect_unavailable(narrow.get(), HMR_MD_OP_MEMORY_WINDOWS);
  char reason[256] = {};
  EXPECT_EQ(hmr_md_query_op(narrow.get(), HMR_MD_OP_MEMORY_WINDOWS, reason, sizeof reason), 0);
  EXPECT_NE(std::string(reason).find("mr_key_size is 4"), std::string::npos) << reason;
  for (const hmr_mw_type type : {HMR_MW_TYPE_1, HMR_MW_TYPE_2}) {
    expect_alloc_window_refused(narrow.get(), type, HMR_ENOSYS);
  }
}

// ============================================================== what a window's key reaches

TEST(MemoryWindow, KeyReachesOnlyTheBoundRange) {
  WindowOnTarget s(4 * kPage, 0x33, HMR_MW_TYPE_1);
  ASSERT_TRUE(s);
  const uint64_t key = s.bind(kPage, 2 * kPage);
  ASSERT_NE(key, kKeySentinel);
  EXPECT_NE(key, hmr_mr_key(s.mr.get()));

  const std::vector<uint8_t> out = pattern(100, 1);
  const uint64_t inside = s.at(kPage + 50);
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr, inside, key));
  EXPECT_EQ(std::memcmp(s.target.data() + kPage + 50, out.data(), out.size()), 0);
  std::vector<uint8_t> in(out.size(), 0);
  ASSERT_HMR_OK(hmr_ep_read(s.initiator(), in.data(), in.size(), nullptr, inside, key));
  EXPECT_EQ(in, out);
  // The window's last byte is reachable, the next one is not.
  const uint8_t last = 0x5c;
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), &last, 1, nullptr, s.at(3 * kPage - 1), key));
  EXPECT_EQ(s.target.data()[3 * kPage - 1], 0x5c);

  // Inside the MR but outside the window.
  s.expect_write_refused(s.at(0), key, 8, HMR_EFAULT);
  s.expect_write_refused(s.at(kPage - 1), key, 2, HMR_EFAULT);
  s.expect_write_refused(s.at(3 * kPage), key, 1, HMR_EFAULT);
  s.expect_write_refused(s.at(3 * kPage - 4), key, 8, HMR_EFAULT);
  uint8_t sink[8];
  EXPECT_HMR_ERROR(hmr_ep_read(s.initiator(), sink, sizeof sink, nullptr, s.at(0), key),
                   HMR_EFAULT);

  // The MR's own key still reaches all of it.
  ASSERT_TRUE(s.write_lands(0, hmr_mr_key(s.mr.get()), 0x1122334455667788ULL));
}

TEST(MemoryWindow, KeyIsGatedByItsMrsEnableStateAndEndpoint) {
  // A window opens no door its MR keeps shut: in an MR_ENDPOINT domain the MR is unreachable
  // until it is bound to the target endpoint and enabled, and so is every window onto it.
  WindowOnTarget s(kPage, 0, HMR_MW_TYPE_1,
                   open_domain(kVirtProvKey | HMR_MR_ENDPOINT, "require=ENDPOINT"));
  ASSERT_TRUE(s);
  const uint64_t key = s.bind(0, kPage);
  ASSERT_NE(key, kKeySentinel);
  s.expect_write_refused(s.at(0), key, 8, HMR_EACCES);
  ASSERT_HMR_OK(hmr_mr_bind(s.mr.get(), hmr_ep_fid(s.link.target.get()), 0));
  ASSERT_HMR_OK(hmr_mr_enable(s.mr.get()));
  ASSERT_TRUE(s.write_lands(0, key, 0xabcdef));
  s.window.reset();  // unbinds before the MR closes
}

TEST(MemoryWindow, OffsetDomainsAddressFromTheMrStart) {
  // The MR starts one page into the buffer: offsets count from the MR, not from the buffer.
  hmr_domain_attr attr;
  WindowOnTarget s(3 * kPage, 0, HMR_MW_TYPE_2,
                   open_domain(HMR_MR_PROV_KEY, "require=PROV_KEY", &attr), kPage);
  ASSERT_TRUE(s);
  ASSERT_EQ(attr.mr_mode, HMR_MR_PROV_KEY);
  const uint64_t key = s.bind(2 * kPage, kPage, HMR_REMOTE_WRITE);
  ASSERT_NE(key, kKeySentinel);

  const std::vector<uint8_t> out = pattern(40, 2);
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), out.data(), out.size(), nullptr, kPage + 8, key));
  EXPECT_EQ(std::memcmp(s.target.data() + 2 * kPage + 8, out.data(), out.size()), 0);
  s.expect_write_refused(8, key, out.size(), HMR_EFAULT);
  s.expect_write_refused(s.at(2 * kPage + 8), key, out.size(), HMR_EFAULT);
  ASSERT_HMR_OK(hmr_mw_invalidate(s.window.get(), nullptr));
}

TEST(MemoryWindow, AccessIsTheWindowsNotTheMrs) {
  WindowOnTarget s(kPage, 0x66, HMR_MW_TYPE_1);
  ASSERT_TRUE(s);
  MwPtr writable = alloc_window(s.domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(writable);
  const uint64_t read_key = s.bind(0, kPage, HMR_REMOTE_READ);
  const uint64_t write_key =
      bind_window(writable.get(), s.mr.get(), s.target.data(), kPage, HMR_REMOTE_WRITE);
  ASSERT_NE(read_key, kKeySentinel);
  ASSERT_NE(write_key, kKeySentinel);
  EXPECT_NE(read_key, write_key);

  const uint64_t addr = s.at(16);
  s.expect_write_refused(addr, read_key, 8, HMR_EACCES);
  uint64_t sink = 0;
  ASSERT_HMR_OK(hmr_ep_read(s.initiator(), &sink, sizeof sink, nullptr, addr, read_key));
  EXPECT_EQ(sink, 0x6666666666666666ULL);

  ASSERT_TRUE(s.write_lands(16, write_key, 0xa1a2a3a4a5a6a7a8ULL));
  EXPECT_HMR_ERROR(hmr_ep_read(s.initiator(), &sink, sizeof sink, nullptr, addr, write_key),
                   HMR_EACCES);
}

// ============================================================== binding again, revoking

TEST(MemoryWindow, TypeOneRebindGivesANewKeyAndKillsTheOld) {
  WindowOnTarget s(2 * kPage, 0, HMR_MW_TYPE_1);
  ASSERT_TRUE(s);
  const uint64_t first_key = s.bind(0, kPage);
  const uint64_t second_key = s.bind(kPage, kPage);
  ASSERT_NE(first_key, kKeySentinel);
  ASSERT_NE(second_key, kKeySentinel);
  EXPECT_NE(second_key, first_key);

  s.expect_write_refused(s.at(0), first_key, 8, HMR_EACCES);
  s.expect_write_refused(s.at(0), second_key, 8, HMR_EFAULT);
  ASSERT_TRUE(s.write_lands(kPage, second_key, 0x77));
}

TEST(MemoryWindow, TypeTwoMustBeInvalidatedBeforeItBindsAgain) {
  WindowOnTarget s(kPage, 0, HMR_MW_TYPE_2);
  ASSERT_TRUE(s);
  const uint64_t first_key = s.bind(0, kPage);
  ASSERT_NE(first_key, kKeySentinel);

  uint64_t key = kKeySentinel;
  EXPECT_HMR_ERROR(
      hmr_mw_bind(s.window.get(), s.mr.get(), s.target.data(), 64, kRemote, nullptr, &key),
      HMR_EBUSY);
  EXPECT_EQ(key, kKeySentinel) << "*key written on failure";
  // The refused bind left the first binding alone.
  const uint64_t value = 0x1234;
  ASSERT_TRUE(s.write_lands(128, first_key, value));

  ASSERT_HMR_OK(hmr_mw_invalidate(s.window.get(), nullptr));
  s.expect_write_refused(s.at(128), first_key, 8, HMR_EACCES);
  const uint64_t second_key = s.bind(0, 64);
  ASSERT_NE(second_key, kKeySentinel);
  EXPECT_NE(second_key, first_key);
  ASSERT_TRUE(s.write_lands(56, second_key, value));
  s.expect_write_refused(s.at(128), second_key, 8, HMR_EFAULT);
}

TEST(MemoryWindow, InvalidateRevokesTheKeyAndNeedsABinding) {
  WindowOnTarget s(kPage, 0x12, HMR_MW_TYPE_1);
  ASSERT_TRUE(s);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(s.window.get(), nullptr), HMR_EINVAL);  // never bound

  const uint64_t key = s.bind(0, kPage);
  ASSERT_NE(key, kKeySentinel);
  hmr_mw_post post;
  std::memset(&post, 0, sizeof post);
  post.size = sizeof post;  // queue NULL: the sim NIC completes it at once
  ASSERT_HMR_OK(hmr_mw_invalidate(s.window.get(), &post));
  s.expect_write_refused(s.at(0), key, 8, HMR_EACCES);
  uint64_t sink = 0;
  EXPECT_HMR_ERROR(hmr_ep_read(s.initiator(), &sink, sizeof sink, nullptr, s.at(0), key),
                   HMR_EACCES);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(s.window.get(), nullptr), HMR_EINVAL);  // no longer bound
}

TEST(MemoryWindow, ClosingABoundWindowRevokesItsKey) {
  WindowOnTarget s(kPage, 0, HMR_MW_TYPE_2);
  ASSERT_TRUE(s);
  const uint64_t key = s.bind(0, kPage);
  ASSERT_NE(key, kKeySentinel);
  ASSERT_HMR_OK(hmr_mw_close(s.window.release()));
  s.expect_write_refused(s.at(0), key, 8, HMR_EACCES);
  ASSERT_HMR_OK(hmr_mr_close(s.mr.release()));  // nothing is bound to it any more
}

// ============================================================== a bound window holds its MR

void expect_bound_window_holds_its_mr(hmr_mw_type type) {
  SCOPED_TRACE(type == HMR_MW_TYPE_1 ? "type 1" : "type 2");
  Pages elsewhere(kPage);
  WindowOnTarget s(kPage, 0, type);
  ASSERT_TRUE(s);
  const uint64_t window_key = s.bind(0, kPage);
  ASSERT_NE(window_key, kKeySentinel);

  if (!expect_close_busy(s.mr)) return;
  const iovec moved{elsewhere.data(), elsewhere.size()};
  EXPECT_HMR_ERROR(rereg_translation(s.mr.get(), &moved, 1), HMR_EBUSY);
  // Both refusals left the MR and the window working.
  const uint64_t value = 0xbeef;
  ASSERT_HMR_OK(hmr_ep_write(s.initiator(), &value, sizeof value, nullptr, s.at(0),
                             hmr_mr_key(s.mr.get())));
  ASSERT_TRUE(s.write_lands(8, window_key, value));

  ASSERT_HMR_OK(hmr_mw_invalidate(s.window.get(), nullptr));
  ASSERT_HMR_OK(rereg_translation(s.mr.get(), &moved, 1));
  ASSERT_HMR_OK(hmr_mr_close(s.mr.release()));
}

TEST(MemoryWindow, BoundTypeOneWindowHoldsItsMr) {
  expect_bound_window_holds_its_mr(HMR_MW_TYPE_1);
}
TEST(MemoryWindow, BoundTypeTwoWindowHoldsItsMr) {
  expect_bound_window_holds_its_mr(HMR_MW_TYPE_2);
}

TEST(MemoryWindow, DomainDoesNotCloseUnderAWindow) {
  hmr_domain_attr attr = domain_attr(kVirtProvKey);
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  hmr_mw* mw = nullptr;
  ASSERT_HMR_OK(hmr_mw_alloc(domain, HMR_MW_TYPE_1, &mw));
  const int close_rc = hmr_domain_close(domain);
  ASSERT_EQ(close_rc, -HMR_EBUSY) << "the domain closed under an open window";
  EXPECT_STRNE(hmr_last_error(), "");
  ASSERT_HMR_OK(hmr_mw_close(mw));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// ============================================================== the registration cache

TEST(MemoryWindow, BindableMrsAreNeverShared) {
  expect_never_shared(kPage, [](hmr_domain* domain, const void* buf, size_t len) {
    return reg(domain, buf, len, kBindable);
  });
}

// ============================================================== bad arguments

TEST(MwBadArgs, Alloc) {
  DomainAndMr handles(open_domain(kVirtProvKey), kPage, kBindable);
  ASSERT_TRUE(handles);
  hmr_domain* const domain = handles.domain.get();
  hmr_mr* const mr = handles.mr.get();

  hmr_mw* mw = sentinel<hmr_mw>();
  EXPECT_HMR_ERROR(hmr_mw_alloc(nullptr, HMR_MW_TYPE_1, &mw), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_alloc(as<hmr_domain>(mr), HMR_MW_TYPE_1, &mw), HMR_EINVAL);
  for (const int type : {0, 3, -1, 1 << 20}) {
    SCOPED_TRACE("type " + std::to_string(type));
    EXPECT_HMR_ERROR(raw_mw_alloc(domain, type, &mw), HMR_EINVAL);
  }
  EXPECT_EQ(mw, sentinel<hmr_mw>()) << "*mw written on failure";
  EXPECT_HMR_ERROR(hmr_mw_alloc(domain, HMR_MW_TYPE_2, nullptr), HMR_EINVAL);
}

// A bindable MR in the middle of a larger buffer, a window, and a connected endpoint.
class MwBindBadArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memset(buffer_.data(), 0, buffer_.size());
    s_ = LoopbackMr(open_domain(kVirtProvKey), mr_start(), 2 * kPage, kBindable);
    ASSERT_TRUE(s_);
    window_ = alloc_window(s_.domain.get(), HMR_MW_TYPE_2);
    ASSERT_TRUE(window_);
  }
  uint8_t* mr_start() const { return buffer_.data() + kPage; }
  // Binds and expects -code with *key untouched.
  void expect_bind_error(hmr_mw* mw, hmr_mr* mr, const void* addr, size_t len, uint64_t access,
                         const hmr_mw_post* post, int code) {
    uint64_t key = kKeySentinel;
    EXPECT_HMR_ERROR(hmr_mw_bind(mw, mr, addr, len, access, post, &key), code);
    EXPECT_EQ(key, kKeySentinel) << "*key written on failure";
  }
  // After any number of refused binds the type 2 window is still unbound: a bind works.
  void TearDown() override {
    if (!window_) return;
    const uint64_t key = bind_window(window_.get(), s_.mr.get(), mr_start(), 64, kRemote);
    ASSERT_NE(key, kKeySentinel);
    const uint64_t value = 0xfeedface;
    ASSERT_HMR_OK(hmr_ep_write(s_.initiator(), &value, sizeof value, nullptr,
                               va(mr_start()), key));
    EXPECT_EQ(std::memcmp(mr_start(), &value, sizeof value), 0);
    ASSERT_HMR_OK(hmr_mw_invalidate(window_.get(), nullptr));
  }

  Pages buffer_{4 * kPage};
  LoopbackMr s_;
  MwPtr window_;
};

TEST_F(MwBindBadArgs, HandlesAndOutput) {
  uint64_t key = kKeySentinel;
  EXPECT_HMR_ERROR(hmr_mw_bind(window_.get(), s_.mr.get(), mr_start(), 64, kRemote, nullptr,
                               nullptr),
                   HMR_EINVAL);
  expect_bind_error(nullptr, s_.mr.get(), mr_start(), 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(as<hmr_mw>(s_.domain.get()), s_.mr.get(), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(as<hmr_mw>(s_.mr.get()), s_.mr.get(), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), nullptr, mr_start(), 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), as<hmr_mr>(s_.domain.get()), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), as<hmr_mr>(window_.get()), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  EXPECT_EQ(key, kKeySentinel);
}

TEST_F(MwBindBadArgs, MrWithoutBindAccessOrOfAnotherDomain) {
  MrPtr plain = reg(s_.domain.get(), mr_start(), kPage, kRemote);
  ASSERT_TRUE(plain);
  expect_bind_error(window_.get(), plain.get(), mr_start(), 64, kRemote, nullptr, HMR_EINVAL);

  DomainPtr other = open_domain(kVirtProvKey);
  ASSERT_TRUE(other);
  MrPtr foreign = reg(other.get(), mr_start(), kPage, kBindable);
  ASSERT_TRUE(foreign);
  expect_bind_error(window_.get(), foreign.get(), mr_start(), 64, kRemote, nullptr, HMR_EINVAL);
}

TEST_F(MwBindBadArgs, RangeOutsideTheMr) {
  uint8_t* const start = mr_start();
  expect_bind_error(window_.get(), s_.mr.get(), start, 0, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), nullptr, 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), start - 1, 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), buffer_.data(), kPage, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), start + 2 * kPage - 63, 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), start + 2 * kPage, 1, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), start, 2 * kPage + 1, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), s_.mr.get(), start + kPage, SIZE_MAX, kRemote, nullptr,
                    HMR_EINVAL);
}

TEST_F(MwBindBadArgs, Access) {
  const uint64_t kNotWindowAccess[] = {0,        HMR_READ,   HMR_WRITE, HMR_REMOTE_READ | HMR_SEND,
                                       HMR_MW_BIND, 1ULL << 40, HMR_REMOTE_WRITE | (1ULL << 63)};
  for (const uint64_t access : kNotWindowAccess) {
    SCOPED_TRACE("access " + std::to_string(access));
    expect_bind_error(window_.get(), s_.mr.get(), mr_start(), 64, access, nullptr, HMR_EINVAL);
  }
  // Rights the MR does not grant.
  MrPtr read_only = reg(s_.domain.get(), mr_start(), kPage, HMR_REMOTE_READ | HMR_MW_BIND);
  ASSERT_TRUE(read_only);
  expect_bind_error(window_.get(), read_only.get(), mr_start(), 64, HMR_REMOTE_WRITE, nullptr,
                    HMR_EACCES);
  expect_bind_error(window_.get(), read_only.get(), mr_start(), 64, kRemote, nullptr, HMR_EACCES);
}

TEST_F(MwBindBadArgs, SimPostsToNoQueue) {
  int not_a_queue = 0;
  hmr_mw_post post;
  std::memset(&post, 0, sizeof post);
  post.size = sizeof post;
  post.queue = &not_a_queue;
  expect_bind_error(window_.get(), s_.mr.get(), mr_start(), 64, kRemote, &post, HMR_EINVAL);

  // A bound window refuses the same post for its invalidation and stays bound.
  post.queue = nullptr;
  uint64_t key = kKeySentinel;
  ASSERT_HMR_OK(hmr_mw_bind(window_.get(), s_.mr.get(), mr_start(), 64, kRemote, &post, &key));
  ASSERT_NE(key, kKeySentinel);
  post.queue = &not_a_queue;
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window_.get(), &post), HMR_EINVAL);
  const uint64_t value = 0x42;
  ASSERT_HMR_OK(hmr_ep_write(s_.initiator(), &value, sizeof value, nullptr,
                             va(mr_start()), key));
  ASSERT_HMR_OK(hmr_mw_invalidate(window_.get(), nullptr));
}

TEST(MwBadArgs, InvalidateAndCloseNeedAWindow) {
  DomainAndMr handles(open_domain(kVirtProvKey), kPage, kBindable);
  ASSERT_TRUE(handles);
  hmr_domain* const domain = handles.domain.get();
  hmr_mr* const mr = handles.mr.get();
  EXPECT_HMR_ERROR(hmr_mw_invalidate(nullptr, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(as<hmr_mw>(domain), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(as<hmr_mw>(mr), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(as<hmr_mw>(domain)), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(as<hmr_mw>(mr)), HMR_EINVAL);
  // A window is not an MR either.
  MwPtr window = alloc_window(domain, HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  EXPECT_HMR_ERROR(hmr_mr_close(as<hmr_mr>(window.get())), HMR_EINVAL);
  EXPECT_EQ(hmr_mr_key(as<hmr_mr>(window.get())), HMR_KEY_NOTAVAIL);
}

// ============================================================== ofi

using MemoryWindowOfi = OfiDomainTest;

TEST_F(MemoryWindowOfi, NotAvailable) {
  expect_unavailable(domain_.get(), HMR_MD_OP_MEMORY_WINDOWS);
  for (const hmr_mw_type type : {HMR_MW_TYPE_1, HMR_MW_TYPE_2}) {
    expect_alloc_window_refused(domain_.get(), type, HMR_ENOSYS);
  }
}

}  // namespace
}  // namespace hmr_memops_test
