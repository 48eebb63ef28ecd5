// Memory windows through the C ABI on the sim NIC: a window's key reaches exactly the bound
// part of its MR with exactly the window's access, rebinding (type 1) or invalidation makes
// the old key dead, a type 2 window must be invalidated before it binds again, and a bound
// window keeps its MR from closing or changing.  Every bad argument is refused with its
// output untouched; the ofi NIC and RAW-key sim domains have no windows.  The contract is
// hmr.h ("memory operations").
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "memory_ops_raw_enum_calls.h"
#include "memory_ops_support.h"

namespace hmr_memops_test {
namespace {

constexpr uint64_t kBindable = kRemote | HMR_MW_BIND;

// Expects a write of `len` bytes to (addr, key) to fail with `code` and to move nothing.
void expect_write_refused(hmr_ep* initiator, uint64_t addr, uint64_t key, size_t len, int code,
                          const Pages& target) {
  const std::vector<uint8_t> before(target.data(), target.data() + target.size());
  const std::vector<uint8_t> out = pattern(len, 0x90);
  EXPECT_HMR_ERROR(hmr_ep_write(initiator, out.data(), out.size(), nullptr, addr, key), code);
  EXPECT_EQ(std::memcmp(before.data(), target.data(), before.size()), 0)
      << "a refused write changed the target";
}

// ============================================================== availability

TEST(MemoryWindow, SimDomainsHaveThemRawKeyDomainsDoNot) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  EXPECT_EQ(query_op(domain.get(), HMR_MD_OP_MEMORY_WINDOWS).rc, 1);

  DomainPtr raw = open_domain(kVirtProvKey | HMR_MR_RAW, "require=RAW;key_size=16");
  ASSERT_TRUE(raw);
  const OpAnswer answer = query_op(raw.get(), HMR_MD_OP_MEMORY_WINDOWS);
  EXPECT_EQ(answer.rc, 0);
  EXPECT_FALSE(answer.reason.empty());
  for (const hmr_mw_type type : {HMR_MW_TYPE_1, HMR_MW_TYPE_2}) {
    hmr_mw* mw = sentinel<hmr_mw>();
    EXPECT_HMR_ERROR(hmr_mw_alloc(raw.get(), type, &mw), HMR_ENOSYS);
    EXPECT_EQ(mw, sentinel<hmr_mw>()) << "*mw written on failure";
  }
}

// ============================================================== what a window's key reaches

TEST(MemoryWindow, KeyReachesOnlyTheBoundRange) {
  Pages target(4 * kPage);
  std::memset(target.data(), 0x33, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  const uint64_t key =
      bind_window(window.get(), mr.get(), target.data() + kPage, 2 * kPage, kRemote);
  ASSERT_NE(key, kKeySentinel);
  EXPECT_NE(key, hmr_mr_key(mr.get()));

  const std::vector<uint8_t> out = pattern(100, 1);
  const uint64_t inside = va(target.data()) + kPage + 50;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, inside, key));
  EXPECT_EQ(std::memcmp(target.data() + kPage + 50, out.data(), out.size()), 0);
  std::vector<uint8_t> in(out.size(), 0);
  ASSERT_HMR_OK(hmr_ep_read(link.initiator.get(), in.data(), in.size(), nullptr, inside, key));
  EXPECT_EQ(in, out);
  // The window's last byte is reachable, the next one is not.
  const uint8_t last = 0x5c;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &last, 1, nullptr,
                             va(target.data()) + 3 * kPage - 1, key));
  EXPECT_EQ(target.data()[3 * kPage - 1], 0x5c);

  // Inside the MR but outside the window.
  expect_write_refused(link.initiator.get(), va(target.data()), key, 8, HMR_EFAULT, target);
  expect_write_refused(link.initiator.get(), va(target.data()) + kPage - 1, key, 2, HMR_EFAULT,
                       target);
  expect_write_refused(link.initiator.get(), va(target.data()) + 3 * kPage, key, 1, HMR_EFAULT,
                       target);
  expect_write_refused(link.initiator.get(), va(target.data()) + 3 * kPage - 4, key, 8,
                       HMR_EFAULT, target);
  uint8_t sink[8];
  EXPECT_HMR_ERROR(
      hmr_ep_read(link.initiator.get(), sink, sizeof sink, nullptr, va(target.data()), key),
      HMR_EFAULT);

  // The MR's own key still reaches all of it.
  const uint64_t value = 0x1122334455667788ULL;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()), hmr_mr_key(mr.get())));
  EXPECT_EQ(std::memcmp(target.data(), &value, sizeof value), 0);
}

TEST(MemoryWindow, KeyIsGatedByItsMrsEnableStateAndEndpoint) {
  // A window opens no door its MR keeps shut: in an MR_ENDPOINT domain the MR is unreachable
  // until it is bound to the target endpoint and enabled, and so is every window onto it.
  Pages target(kPage);
  std::memset(target.data(), 0, target.size());
  DomainPtr domain = open_domain(kVirtProvKey | HMR_MR_ENDPOINT, "require=ENDPOINT");
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  const uint64_t key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  ASSERT_NE(key, kKeySentinel);
  expect_write_refused(link.initiator.get(), va(target.data()), key, 8, HMR_EACCES, target);
  ASSERT_HMR_OK(hmr_mr_bind(mr.get(), hmr_ep_fid(link.target.get()), 0));
  ASSERT_HMR_OK(hmr_mr_enable(mr.get()));
  const uint64_t value = 0xabcdef;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()), key));
  EXPECT_EQ(std::memcmp(target.data(), &value, sizeof value), 0);
  window.reset();  // unbinds before the MR closes
}

TEST(MemoryWindow, OffsetDomainsAddressFromTheMrStart) {
  Pages target(3 * kPage);
  std::memset(target.data(), 0, target.size());
  hmr_domain_attr attr;
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY, "require=PROV_KEY", &attr);
  ASSERT_TRUE(domain);
  ASSERT_EQ(attr.mr_mode, HMR_MR_PROV_KEY);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  // The MR starts one page into the buffer: offsets count from the MR, not from the buffer.
  MrPtr mr = reg(domain.get(), target.data() + kPage, 2 * kPage, kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_2);
  ASSERT_TRUE(window);
  const uint64_t key = bind_window(window.get(), mr.get(), target.data() + 2 * kPage, kPage,
                                   HMR_REMOTE_WRITE);
  ASSERT_NE(key, kKeySentinel);

  const std::vector<uint8_t> out = pattern(40, 2);
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), out.data(), out.size(), nullptr, kPage + 8,
                             key));
  EXPECT_EQ(std::memcmp(target.data() + 2 * kPage + 8, out.data(), out.size()), 0);
  expect_write_refused(link.initiator.get(), 8, key, out.size(), HMR_EFAULT, target);
  expect_write_refused(link.initiator.get(), va(target.data()) + 2 * kPage + 8, key, out.size(),
                       HMR_EFAULT, target);
  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), nullptr));
}

TEST(MemoryWindow, AccessIsTheWindowsNotTheMrs) {
  Pages target(kPage);
  std::memset(target.data(), 0x66, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr readable = alloc_window(domain.get(), HMR_MW_TYPE_1);
  MwPtr writable = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(readable && writable);
  const uint64_t read_key =
      bind_window(readable.get(), mr.get(), target.data(), kPage, HMR_REMOTE_READ);
  const uint64_t write_key =
      bind_window(writable.get(), mr.get(), target.data(), kPage, HMR_REMOTE_WRITE);
  ASSERT_NE(read_key, kKeySentinel);
  ASSERT_NE(write_key, kKeySentinel);
  EXPECT_NE(read_key, write_key);

  const uint64_t addr = va(target.data()) + 16;
  expect_write_refused(link.initiator.get(), addr, read_key, 8, HMR_EACCES, target);
  uint64_t sink = 0;
  ASSERT_HMR_OK(hmr_ep_read(link.initiator.get(), &sink, sizeof sink, nullptr, addr, read_key));
  EXPECT_EQ(sink, 0x6666666666666666ULL);

  const uint64_t value = 0xa1a2a3a4a5a6a7a8ULL;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr, addr, write_key));
  EXPECT_EQ(std::memcmp(target.data() + 16, &value, sizeof value), 0);
  EXPECT_HMR_ERROR(hmr_ep_read(link.initiator.get(), &sink, sizeof sink, nullptr, addr, write_key),
                   HMR_EACCES);
}

// ============================================================== binding again, revoking

TEST(MemoryWindow, TypeOneRebindGivesANewKeyAndKillsTheOld) {
  Pages target(2 * kPage);
  std::memset(target.data(), 0, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  const uint64_t first_key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  const uint64_t second_key =
      bind_window(window.get(), mr.get(), target.data() + kPage, kPage, kRemote);
  ASSERT_NE(first_key, kKeySentinel);
  ASSERT_NE(second_key, kKeySentinel);
  EXPECT_NE(second_key, first_key);

  expect_write_refused(link.initiator.get(), va(target.data()), first_key, 8, HMR_EACCES, target);
  expect_write_refused(link.initiator.get(), va(target.data()), second_key, 8, HMR_EFAULT,
                       target);
  const uint64_t value = 0x77;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()) + kPage, second_key));
  EXPECT_EQ(std::memcmp(target.data() + kPage, &value, sizeof value), 0);
}

TEST(MemoryWindow, TypeTwoMustBeInvalidatedBeforeItBindsAgain) {
  Pages target(kPage);
  std::memset(target.data(), 0, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_2);
  ASSERT_TRUE(window);
  const uint64_t first_key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  ASSERT_NE(first_key, kKeySentinel);

  uint64_t key = kKeySentinel;
  EXPECT_HMR_ERROR(
      hmr_mw_bind(window.get(), mr.get(), target.data(), 64, kRemote, nullptr, &key), HMR_EBUSY);
  EXPECT_EQ(key, kKeySentinel) << "*key written on failure";
  // The refused bind left the first binding alone.
  const uint64_t value = 0x1234;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()) + 128, first_key));
  EXPECT_EQ(std::memcmp(target.data() + 128, &value, sizeof value), 0);

  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), nullptr));
  expect_write_refused(link.initiator.get(), va(target.data()) + 128, first_key, 8, HMR_EACCES,
                       target);
  const uint64_t second_key = bind_window(window.get(), mr.get(), target.data(), 64, kRemote);
  ASSERT_NE(second_key, kKeySentinel);
  EXPECT_NE(second_key, first_key);
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()) + 56, second_key));
  EXPECT_EQ(std::memcmp(target.data() + 56, &value, sizeof value), 0);
  expect_write_refused(link.initiator.get(), va(target.data()) + 128, second_key, 8, HMR_EFAULT,
                       target);
}

TEST(MemoryWindow, InvalidateRevokesTheKeyAndNeedsABinding) {
  Pages target(kPage);
  std::memset(target.data(), 0x12, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window.get(), nullptr), HMR_EINVAL);  // never bound

  const uint64_t key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  ASSERT_NE(key, kKeySentinel);
  hmr_mw_post post;
  std::memset(&post, 0, sizeof post);
  post.size = sizeof post;  // queue NULL: the sim NIC completes it at once
  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), &post));
  expect_write_refused(link.initiator.get(), va(target.data()), key, 8, HMR_EACCES, target);
  uint64_t sink = 0;
  EXPECT_HMR_ERROR(hmr_ep_read(link.initiator.get(), &sink, sizeof sink, nullptr,
                               va(target.data()), key),
                   HMR_EACCES);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window.get(), nullptr), HMR_EINVAL);  // no longer bound
}

TEST(MemoryWindow, ClosingABoundWindowRevokesItsKey) {
  Pages target(kPage);
  std::memset(target.data(), 0, target.size());
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_2);
  ASSERT_TRUE(window);
  const uint64_t key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  ASSERT_NE(key, kKeySentinel);
  ASSERT_HMR_OK(hmr_mw_close(window.release()));
  expect_write_refused(link.initiator.get(), va(target.data()), key, 8, HMR_EACCES, target);
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));  // nothing is bound to it any more
}

// ============================================================== a bound window holds its MR

void expect_bound_window_holds_its_mr(hmr_mw_type type) {
  SCOPED_TRACE(type == HMR_MW_TYPE_1 ? "type 1" : "type 2");
  Pages target(kPage);
  std::memset(target.data(), 0, target.size());
  Pages elsewhere(kPage);
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Link link = connect(domain.get(), domain.get());
  ASSERT_TRUE(link);
  MrPtr mr = reg(domain.get(), target.data(), target.size(), kBindable);
  ASSERT_TRUE(mr);
  MwPtr window = alloc_window(domain.get(), type);
  ASSERT_TRUE(window);
  const uint64_t window_key = bind_window(window.get(), mr.get(), target.data(), kPage, kRemote);
  ASSERT_NE(window_key, kKeySentinel);

  const int close_rc = hmr_mr_close(mr.get());
  EXPECT_EQ(close_rc, -HMR_EBUSY) << hmr_last_error();
  if (close_rc == 0) {
    mr.release();  // closed after all: nothing below can use it
    return;
  }
  EXPECT_STRNE(hmr_last_error(), "");
  const iovec moved{elsewhere.data(), elsewhere.size()};
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.mr_iov = &moved;
  attr.iov_count = 1;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION, &attr), HMR_EBUSY);
  // Both refusals left the MR and the window working.
  const uint64_t value = 0xbeef;
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()), hmr_mr_key(mr.get())));
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), &value, sizeof value, nullptr,
                             va(target.data()) + 8, window_key));
  EXPECT_EQ(std::memcmp(target.data() + 8, &value, sizeof value), 0);

  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), nullptr));
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION, &attr));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
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
  hmr_domain_attr attr;
  DomainPtr domain = open_domain(kVirtProvKey, nullptr, &attr);
  ASSERT_TRUE(domain);
  if (std::string(attr.cache_monitor) == "disabled") {
    GTEST_SKIP() << "no cache monitor starts here, so nothing would be shared anyway";
  }
  Pages memory(kPage);
  {
    // Control: the same range without HMR_MW_BIND is shared.
    MrPtr first = reg(domain.get(), memory.data(), memory.size(), kRemote);
    MrPtr second = reg(domain.get(), memory.data(), memory.size(), kRemote);
    ASSERT_TRUE(first && second);
    ASSERT_EQ(query_mr(second.get()).cached, 1) << "the cache did not share a plain MR";
  }
  MrPtr first = reg(domain.get(), memory.data(), memory.size(), kBindable);
  MrPtr second = reg(domain.get(), memory.data(), memory.size(), kBindable);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(query_mr(first.get()).cached, 0);
  EXPECT_EQ(query_mr(second.get()).cached, 0);
  EXPECT_NE(hmr_mr_key(first.get()), hmr_mr_key(second.get()));
}

// ============================================================== bad arguments

TEST(MwBadArgs, Alloc) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Pages memory(kPage);
  MrPtr mr = reg(domain.get(), memory.data(), memory.size(), kBindable);
  ASSERT_TRUE(mr);

  hmr_mw* mw = sentinel<hmr_mw>();
  EXPECT_HMR_ERROR(hmr_mw_alloc(nullptr, HMR_MW_TYPE_1, &mw), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_alloc(as<hmr_domain>(mr.get()), HMR_MW_TYPE_1, &mw), HMR_EINVAL);
  for (const int type : {0, 3, -1, 1 << 20}) {
    SCOPED_TRACE("type " + std::to_string(type));
    EXPECT_HMR_ERROR(raw_mw_alloc(domain.get(), type, &mw), HMR_EINVAL);
  }
  EXPECT_EQ(mw, sentinel<hmr_mw>()) << "*mw written on failure";
  EXPECT_HMR_ERROR(hmr_mw_alloc(domain.get(), HMR_MW_TYPE_2, nullptr), HMR_EINVAL);
}

// A bindable MR in the middle of a larger buffer, a window, and a connected endpoint.
class MwBindBadArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memset(buffer_.data(), 0, buffer_.size());
    domain_ = open_domain(kVirtProvKey);
    ASSERT_TRUE(domain_);
    link_ = connect(domain_.get(), domain_.get());
    ASSERT_TRUE(link_);
    mr_ = reg(domain_.get(), mr_start(), 2 * kPage, kBindable);
    ASSERT_TRUE(mr_);
    window_ = alloc_window(domain_.get(), HMR_MW_TYPE_2);
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
    const uint64_t key = bind_window(window_.get(), mr_.get(), mr_start(), 64, kRemote);
    ASSERT_NE(key, kKeySentinel);
    const uint64_t value = 0xfeedface;
    ASSERT_HMR_OK(hmr_ep_write(link_.initiator.get(), &value, sizeof value, nullptr,
                               va(mr_start()), key));
    EXPECT_EQ(std::memcmp(mr_start(), &value, sizeof value), 0);
    ASSERT_HMR_OK(hmr_mw_invalidate(window_.get(), nullptr));
  }

  Pages buffer_{4 * kPage};
  DomainPtr domain_;
  Link link_;
  MrPtr mr_;
  MwPtr window_;
};

TEST_F(MwBindBadArgs, HandlesAndOutput) {
  uint64_t key = kKeySentinel;
  EXPECT_HMR_ERROR(hmr_mw_bind(window_.get(), mr_.get(), mr_start(), 64, kRemote, nullptr,
                               nullptr),
                   HMR_EINVAL);
  expect_bind_error(nullptr, mr_.get(), mr_start(), 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(as<hmr_mw>(domain_.get()), mr_.get(), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(as<hmr_mw>(mr_.get()), mr_.get(), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), nullptr, mr_start(), 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), as<hmr_mr>(domain_.get()), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), as<hmr_mr>(window_.get()), mr_start(), 64, kRemote, nullptr,
                    HMR_EINVAL);
  EXPECT_EQ(key, kKeySentinel);
}

TEST_F(MwBindBadArgs, MrWithoutBindAccessOrOfAnotherDomain) {
  MrPtr plain = reg(domain_.get(), mr_start(), kPage, kRemote);
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
  expect_bind_error(window_.get(), mr_.get(), start, 0, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), nullptr, 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), start - 1, 64, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), buffer_.data(), kPage, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), start + 2 * kPage - 63, 64, kRemote, nullptr,
                    HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), start + 2 * kPage, 1, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), start, 2 * kPage + 1, kRemote, nullptr, HMR_EINVAL);
  expect_bind_error(window_.get(), mr_.get(), start + kPage, SIZE_MAX, kRemote, nullptr,
                    HMR_EINVAL);
}

TEST_F(MwBindBadArgs, Access) {
  const uint64_t kNotWindowAccess[] = {0,        HMR_READ,   HMR_WRITE, HMR_REMOTE_READ | HMR_SEND,
                                       HMR_MW_BIND, 1ULL << 40, HMR_REMOTE_WRITE | (1ULL << 63)};
  for (const uint64_t access : kNotWindowAccess) {
    SCOPED_TRACE("access " + std::to_string(access));
    expect_bind_error(window_.get(), mr_.get(), mr_start(), 64, access, nullptr, HMR_EINVAL);
  }
  // Rights the MR does not grant.
  MrPtr read_only = reg(domain_.get(), mr_start(), kPage, HMR_REMOTE_READ | HMR_MW_BIND);
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
  expect_bind_error(window_.get(), mr_.get(), mr_start(), 64, kRemote, &post, HMR_EINVAL);

  // A bound window refuses the same post for its invalidation and stays bound.
  post.queue = nullptr;
  uint64_t key = kKeySentinel;
  ASSERT_HMR_OK(hmr_mw_bind(window_.get(), mr_.get(), mr_start(), 64, kRemote, &post, &key));
  ASSERT_NE(key, kKeySentinel);
  post.queue = &not_a_queue;
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window_.get(), &post), HMR_EINVAL);
  const uint64_t value = 0x42;
  ASSERT_HMR_OK(hmr_ep_write(link_.initiator.get(), &value, sizeof value, nullptr,
                             va(mr_start()), key));
  ASSERT_HMR_OK(hmr_mw_invalidate(window_.get(), nullptr));
}

TEST(MwBadArgs, InvalidateAndCloseNeedAWindow) {
  DomainPtr domain = open_domain(kVirtProvKey);
  ASSERT_TRUE(domain);
  Pages memory(kPage);
  MrPtr mr = reg(domain.get(), memory.data(), memory.size(), kBindable);
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(nullptr, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(as<hmr_mw>(domain.get()), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(as<hmr_mw>(mr.get()), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(as<hmr_mw>(domain.get())), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_close(as<hmr_mw>(mr.get())), HMR_EINVAL);
  // A window is not an MR either.
  MwPtr window = alloc_window(domain.get(), HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  EXPECT_HMR_ERROR(hmr_mr_close(as<hmr_mr>(window.get())), HMR_EINVAL);
  EXPECT_EQ(hmr_mr_key(as<hmr_mr>(window.get())), HMR_KEY_NOTAVAIL);
}

// ============================================================== ofi

TEST(MemoryWindowOfi, NotAvailable) {
  OfiDomain ofi = open_ofi_domain();
  if (!ofi.domain) GTEST_SKIP() << "no ofi domain opens here: " << ofi.why_not;
  const OpAnswer answer = query_op(ofi.domain.get(), HMR_MD_OP_MEMORY_WINDOWS);
  EXPECT_EQ(answer.rc, 0);
  EXPECT_FALSE(answer.reason.empty());
  for (const hmr_mw_type type : {HMR_MW_TYPE_1, HMR_MW_TYPE_2}) {
    hmr_mw* mw = sentinel<hmr_mw>();
    EXPECT_HMR_ERROR(hmr_mw_alloc(ofi.domain.get(), type, &mw), HMR_ENOSYS);
    EXPECT_EQ(mw, sentinel<hmr_mw>());
  }
}

}  // namespace
}  // namespace hmr_memops_test
