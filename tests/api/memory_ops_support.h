// Helpers shared by the tests of the memory operations (re-registration, memory windows, ODP,
// indirect keys): window owners, ofi domains for the "not available here" paths, and the
// small checks every one of those files makes.
#pragma once

#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
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

}  // namespace hmr_memops_test
