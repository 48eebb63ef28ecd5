// Helpers shared by the tests of the memory operations (re-registration, memory windows, ODP,
// indirect keys): window owners, ofi domains for the "not available here" paths, and the
// small checks every one of those files makes.
#pragma once

#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace hmr_memops_test {

using namespace hmr_test;  // DomainPtr, MrPtr, Pages, Link, reg, connect, EXPECT_HMR_ERROR

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
// sim domains addressed by virtual address with keys the NIC chooses.
constexpr uint64_t kVirtProvKey = HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY;

inline uint64_t va(const void* p) { return reinterpret_cast<uint64_t>(p); }

inline std::vector<uint8_t> pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> bytes(len);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 29);
  return bytes;
}

// A pointer no successful call could produce; proves an output was left alone on failure.
template <typename T>
T* sentinel() {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(0x1));
}
constexpr uint64_t kKeySentinel = 0x5e5e5e5e5e5e5e5eULL;

// Handles of other types, for "wrong type" arguments: the object tag must refuse them.
template <typename To, typename From>
To* as(From* handle) {
  return reinterpret_cast<To*>(handle);
}

struct MwCloser {
  void operator()(hmr_mw* w) const { EXPECT_EQ(hmr_mw_close(w), 0) << hmr_last_error(); }
};
using MwPtr = std::unique_ptr<hmr_mw, MwCloser>;

inline MwPtr alloc_window(hmr_domain* domain, hmr_mw_type type) {
  hmr_mw* mw = nullptr;
  const int rc = hmr_mw_alloc(domain, type, &mw);
  EXPECT_EQ(rc, 0) << "hmr_mw_alloc(type " << static_cast<int>(type) << "): " << hmr_last_error();
  return MwPtr(rc == 0 ? mw : nullptr);
}

// Binds on the sim NIC (no queue) and returns the window's key, or kKeySentinel on failure.
inline uint64_t bind_window(hmr_mw* mw, hmr_mr* mr, const void* addr, size_t len,
                            uint64_t access) {
  uint64_t key = kKeySentinel;
  const int rc = hmr_mw_bind(mw, mr, addr, len, access, nullptr, &key);
  EXPECT_EQ(rc, 0) << "hmr_mw_bind: " << hmr_last_error();
  return key;
}

// A sim domain without a registration cache: every MR has a NIC registration of its own, so a
// key that an MR gives up is gone at the target (a cache would keep it for other MRs).
inline DomainPtr open_uncached_domain(uint64_t app_mode, const char* options = nullptr) {
  hmr_domain_attr attr = domain_attr(app_mode, options);
  attr.cache_monitor = "disabled";
  hmr_domain* domain = nullptr;
  EXPECT_EQ(hmr_domain_open(&attr, &domain), 0) << hmr_last_error();
  return DomainPtr(domain);
}

inline hmr_mr_info query_mr(hmr_mr* mr) {
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_EQ(hmr_mr_query(mr, &info), 0) << hmr_last_error();
  return info;
}

inline hmr_mr_rereg_attr rereg_attr() {
  hmr_mr_rereg_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  return attr;
}

// hmr_mr_rereg of the translation alone, or of the access alone.
inline int rereg_translation(hmr_mr* mr, const iovec* iov, size_t count) {
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.mr_iov = iov;
  attr.iov_count = count;
  return hmr_mr_rereg(mr, HMR_MR_REREG_TRANSLATION, &attr);
}
inline int rereg_access(hmr_mr* mr, uint64_t access) {
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.access = access;
  return hmr_mr_rereg(mr, HMR_MR_REREG_ACCESS, &attr);
}

// Expects hmr_mw_alloc to fail with -code and to leave *mw alone.
inline void expect_alloc_window_refused(hmr_domain* domain, hmr_mw_type type, int code) {
  hmr_mw* mw = sentinel<hmr_mw>();
  EXPECT_HMR_ERROR(hmr_mw_alloc(domain, type, &mw), code);
  EXPECT_EQ(mw, sentinel<hmr_mw>()) << "*mw written on failure";
}

// A sim domain connected to itself and one MR of it over [buf, +len): where most of the tests
// of these operations start.  A step that fails leaves its member (and the later ones) null
// with the failure recorded: test the whole with ASSERT_TRUE.  Members close in reverse order.
struct LoopbackMr {
  DomainPtr domain;
  Link link;
  MrPtr mr;

  LoopbackMr() = default;
  LoopbackMr(DomainPtr opened, const void* buf, size_t len, uint64_t access, uint64_t key = 0,
             uint64_t flags = 0)
      : domain(std::move(opened)) {
    if (!domain) return;
    link = connect(domain.get(), domain.get());
    if (link) mr = reg(domain.get(), buf, len, access, key, flags);
  }
  explicit operator bool() const { return domain && link && mr; }
  hmr_ep* initiator() const { return link.initiator.get(); }
};

// A domain and one MR over fresh pages of its own, for tests that need handles of each type.
struct DomainAndMr {
  DomainPtr domain;
  Pages memory;
  MrPtr mr;

  DomainAndMr(DomainPtr opened, size_t bytes, uint64_t access)
      : domain(std::move(opened)), memory(bytes) {
    if (domain) mr = reg(domain.get(), memory.data(), memory.size(), access);
  }
  explicit operator bool() const { return domain && mr; }
};

// For the MRs that the registration cache must never share: in a sim domain with a cache (the
// test is skipped where none starts), plain MRs of the same memory are shared (the control) and
// two made by `register_one(domain, buf, len)` are not.
template <typename Register>
void expect_never_shared(size_t bytes, Register register_one) {
  hmr_domain_attr attr;
  DomainPtr domain = open_domain(kVirtProvKey, nullptr, &attr);
  ASSERT_TRUE(domain);
  if (std::string(attr.cache_monitor) == "disabled") {
    GTEST_SKIP() << "no cache monitor starts here, so nothing would be shared anyway";
  }
  Pages memory(bytes);
  {
    MrPtr first = reg(domain.get(), memory.data(), memory.size(), kRemote);
    MrPtr second = reg(domain.get(), memory.data(), memory.size(), kRemote);
    ASSERT_TRUE(first && second);
    ASSERT_EQ(query_mr(second.get()).cached, 1) << "the cache did not share a plain MR";
  }
  MrPtr first = register_one(domain.get(), memory.data(), memory.size());
  MrPtr second = register_one(domain.get(), memory.data(), memory.size());
  ASSERT_TRUE(first && second);
  EXPECT_EQ(query_mr(first.get()).cached, 0);
  EXPECT_EQ(query_mr(second.get()).cached, 0);
  EXPECT_NE(hmr_mr_key(first.get()), hmr_mr_key(second.get()));
}

// Expects closing `mr` to be refused with -HMR_EBUSY and a reason.  False when it closed after
// all (released: nothing may use it), for the test to stop there.
inline bool expect_close_busy(MrPtr& mr) {
  const int close_rc = hmr_mr_close(mr.get());
  EXPECT_EQ(close_rc, -HMR_EBUSY) << hmr_last_error();
  if (close_rc == 0) {
    mr.release();
    return false;
  }
  EXPECT_STRNE(hmr_last_error(), "");
  return true;
}

// hmr_md_query_op's answer and the reason it wrote (empty when available).
struct OpAnswer {
  int rc;
  std::string reason;
};
inline OpAnswer query_op(hmr_domain* domain, hmr_md_op op) {
  char reason[256];
  std::memset(reason, 'x', sizeof reason);
  reason[sizeof reason - 1] = '\0';
  const int rc = hmr_md_query_op(domain, op, reason, sizeof reason);
  return {rc, rc == 0 ? std::string(reason) : std::string()};
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Expects `op` to be unavailable on `domain`, with a reason.
inline void expect_unavailable(hmr_domain* domain, hmr_md_op op) {
  const OpAnswer answer = query_op(domain, op);
  EXPECT_EQ(answer.rc, 0) << "op " << static_cast<int>(op);
  EXPECT_FALSE(answer.reason.empty()) << "op " << static_cast<int>(op);
}

// An "ofi" domain on shm or, failing that, on tcp over loopback: null, with why, when neither
// opens here (no libfabric, no such provider).
struct OfiDomain {
  DomainPtr domain;
  std::string why_not;
};
inline OfiDomain open_ofi_domain() {
  OfiDomain opened;
  for (const char* options : {"provider=shm", "provider=tcp;domain=lo;fabric=127.0.0.1/32"}) {
    hmr_domain_attr attr = domain_attr(HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_ALLOCATED,
                                       options);
    attr.nic = "ofi";
    attr.cache_monitor = "disabled";
    hmr_domain* domain = nullptr;
    if (hmr_domain_open(&attr, &domain) == 0) {
      opened.domain.reset(domain);
      return opened;
    }
    opened.why_not += std::string(options) + ": " + hmr_last_error() + "; ";
  }
  return opened;
}

// The tests of an ofi domain, with one page of memory for its MRs; skipped where none opens.
class OfiDomainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OfiDomain ofi = open_ofi_domain();
    if (!ofi.domain) GTEST_SKIP() << "no ofi domain opens here: " << ofi.why_not;
    domain_ = std::move(ofi.domain);
  }
  MrPtr reg_memory() const { return reg(domain_.get(), memory_.data(), memory_.size(), kRemote); }

  DomainPtr domain_;
  Pages memory_{kPage};
};

}  // namespace hmr_memops_test
