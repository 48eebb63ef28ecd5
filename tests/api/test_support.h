// Shared helpers for tests of the public C ABI.
#pragma once

#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../sanitizer_build.h"  // kUnderThreadSanitizer

namespace hmr_test {

// Expects `call` to fail with -code and to leave a non-empty reason.
#define EXPECT_HMR_ERROR(call, code)                                          \
  do {                                                                        \
    const int hmr_rc_ = (call);                                               \
    EXPECT_EQ(hmr_rc_, -(code)) << #call << ": " << hmr_last_error();         \
    if (hmr_rc_ < 0) { EXPECT_STRNE(hmr_last_error(), "") << #call; }         \
  } while (0)

#define ASSERT_HMR_OK(call)                                                   \
  do {                                                                        \
    const int hmr_rc_ = (call);                                               \
    ASSERT_EQ(hmr_rc_, 0) << #call << ": " << hmr_last_error();               \
  } while (0)

// What a test NIC's registration hands back when it keeps no handle or descriptor: the next
// key of `next_key`, and 0 (success).
inline int hand_out_key(hmr_nic_mr* mr, std::atomic<uint64_t>& next_key) {
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = next_key.fetch_add(1);
  return 0;
}

// A callback NIC over `context` with key_size 8 and `caps`: `reg` registers by address, and by
// dma-buf too where `caps` has HMR_NIC_CB_DMABUF.
inline hmr_nic_callbacks callback_nic(void* context, uint64_t caps,
                                      decltype(hmr_nic_callbacks::reg_va) reg,
                                      decltype(hmr_nic_callbacks::dereg) dereg) {
  hmr_nic_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  callbacks.size = sizeof callbacks;
  callbacks.context = context;
  callbacks.key_size = 8;
  callbacks.caps = caps;
  callbacks.reg_va = reg;
  if (caps & HMR_NIC_CB_DMABUF) callbacks.reg_dmabuf = reg;
  callbacks.dereg = dereg;
  return callbacks;
}

// An attr with size set and everything else zero.
inline hmr_domain_attr domain_attr(uint64_t app_mode, const char* nic_options = nullptr) {
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = "sim";
  attr.nic_options = nic_options;
  attr.mr_mode = app_mode;
  return attr;
}

// The same for the callback NIC `callbacks` (which must outlive the domain).
inline hmr_domain_attr callback_domain_attr(hmr_nic_callbacks& callbacks, uint64_t app_mode) {
  hmr_domain_attr attr = domain_attr(app_mode);
  attr.nic = "callback";
  attr.nic_handle = &callbacks;
  return attr;
}

// Opens a sim domain or fails the test; `attr_out` receives the negotiated attributes.
hmr_domain* open_sim_domain(uint64_t app_mode, const char* nic_options = nullptr,
                            hmr_domain_attr* attr_out = nullptr);

// ---- owners that close what a test opened, even when an assertion ends the test early ----
struct DomainCloser {
  void operator()(hmr_domain* d) const { EXPECT_EQ(hmr_domain_close(d), 0) << hmr_last_error(); }
};
struct MrCloser {
  void operator()(hmr_mr* m) const { EXPECT_EQ(hmr_mr_close(m), 0) << hmr_last_error(); }
};
struct EpCloser {
  void operator()(hmr_ep* e) const { EXPECT_EQ(hmr_ep_close(e), 0) << hmr_last_error(); }
};
struct CntrCloser {
  void operator()(hmr_cntr* c) const { EXPECT_EQ(hmr_cntr_close(c), 0) << hmr_last_error(); }
};
struct EqCloser {
  void operator()(hmr_eq* q) const { EXPECT_EQ(hmr_eq_close(q), 0) << hmr_last_error(); }
};
using DomainPtr = std::unique_ptr<hmr_domain, DomainCloser>;
using MrPtr = std::unique_ptr<hmr_mr, MrCloser>;
using EpPtr = std::unique_ptr<hmr_ep, EpCloser>;
using CntrPtr = std::unique_ptr<hmr_cntr, CntrCloser>;
using EqPtr = std::unique_ptr<hmr_eq, EqCloser>;

inline DomainPtr open_domain(uint64_t app_mode, const char* options = nullptr,
                             hmr_domain_attr* attr_out = nullptr) {
  return DomainPtr(open_sim_domain(app_mode, options, attr_out));
}
// Registers [buf, buf+len) or records a failure; a null MrPtr on failure.
MrPtr reg(hmr_domain* domain, const void* buf, size_t len, uint64_t access, uint64_t key = 0,
          uint64_t flags = 0);
EpPtr open_ep(hmr_domain* domain);
CntrPtr open_cntr(hmr_domain* domain);

// An initiator endpoint connected to a target endpoint.  The initiator is declared last so it
// closes first: nothing is connected to the target when the target closes.
struct Link {
  EpPtr target;
  EpPtr initiator;
  explicit operator bool() const { return target && initiator; }
};
Link connect(hmr_domain* initiator_domain, hmr_domain* target_domain);

// Page-aligned anonymous memory, unmapped on destruction (unless released).
class Pages {
 public:
  explicit Pages(size_t bytes);
  ~Pages();
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(address_); }
  size_t size() const { return bytes_; }
  // Unmaps now (for tests of what happens to registered memory that goes away).
  void unmap();

 private:
  void* address_;
  size_t bytes_;
};

// hmr_domain_query_stats, a test failure (and zeros) when it fails.
hmr_domain_stats domain_stats(hmr_domain* domain);

// Takes CAP_IPC_LOCK out of this process's effective and permitted sets (capset(2)), so that
// RLIMIT_MEMLOCK applies to it as to an unprivileged process (root here has it).  Nothing gives
// it back: for a child of its own (run_self).  false (errno set) when capget or capset fails.
bool drop_cap_ipc_lock();
// Sets RLIMIT_MEMLOCK's soft limit to `bytes`; false (errno set) when setrlimit refuses.
bool set_memlock(uint64_t bytes);

// Runs this test binary again in a new process with `arguments` (e.g. a --gtest_filter) and
// `environment` ("NAME=value") added to this process's environment; returns its exit status
// (-1 when it could not run or died of a signal).  For tests whose effects must not outlive
// them, such as a library that patches libc.
int run_self(const std::vector<std::string>& arguments, const std::vector<std::string>& environment);
// Runs `body` in a child forked from this process as it is, without exec (for tests of what a
// forked child inherits), and returns the status `body` returns, which the child exits with;
// -1 when it could not fork or died of a signal (it is killed after 20 s rather than hang the
// test).  gtest assertions in the child are lost: `body` reports through its status.
int run_forked(const std::function<int()>& body);

}  // namespace hmr_test
