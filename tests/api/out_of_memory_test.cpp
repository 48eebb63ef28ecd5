// Out of memory inside hmr (DESIGN.md: bad luck gets a clear error code and a reason, never a
// crash or a leak).  This binary's allocator (failing_allocator.h) fails the n-th allocation
// the calling thread makes, for n = 1, 2, ... until a call meets no failure at all: every
// allocation of the call fails once.  Each call then fails with HMR_ENOMEM and a reason, or
// succeeds; either way the NIC (a callback NIC counting what it holds) holds nothing once the
// domain is closed, and the domain closes (no MR left open behind the caller's back).
#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/failing_allocator.h"
#include "tests/api/out_of_memory_common.h"
#include "tests/api/test_support.h"
#include "tests/hmem_api/fake_cuda_driver.h"

namespace {

using hmr_test::allocation_failure::disarm;
using hmr_test::allocation_failure::fail_at_least;
using hmr_test::allocation_failure::fail_nth;

using hmr_test::out_of_memory::kAccess;
using hmr_test::out_of_memory::kAppMode;
using hmr_test::out_of_memory::kPage;
// More rounds than any call has allocations: a loop that never meets a call without a
// failure stops here, with a test failure.
constexpr uint64_t kMostRounds = 5000;

struct CountingNic {
  std::atomic<int64_t> held{0};
  std::atomic<uint64_t> next_key{1};
};

int counting_register(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
  static_cast<CountingNic*>(context)->held.fetch_add(1);
  return hmr_test::hand_out_key(mr, static_cast<CountingNic*>(context)->next_key);
}

int counting_deregister(void* context, const hmr_nic_mr*, char*, size_t) {
  static_cast<CountingNic*>(context)->held.fetch_sub(1);
  return 0;
}

// A domain on `nic` with hmr_domain_attr.flags `flags`, opened with nothing armed.
hmr_domain* open_counting_domain(hmr_nic_callbacks& callbacks, uint64_t flags = 0) {
  hmr_domain_attr attr = hmr_test::callback_domain_attr(callbacks, kAppMode);
  attr.flags = flags;
  hmr_domain* domain = nullptr;
  EXPECT_EQ(hmr_domain_open(&attr, &domain), 0) << hmr_last_error();
  return domain;
}

// The outcome of one call under an armed failure: 0, or -HMR_ENOMEM with a reason.
void expect_success_or_enomem(int rc, uint64_t nth, const char* call) {
  if (rc == 0) return;
  EXPECT_EQ(rc, -HMR_ENOMEM) << call << ", allocation " << nth << " failed: " << hmr_last_error();
  EXPECT_STRNE(hmr_last_error(), "") << call << ", allocation " << nth;
}

// Closes the domain (which must succeed: nothing may be left open) and checks the NIC holds
// nothing.
void close_and_check(hmr_domain* domain, const CountingNic& nic, uint64_t nth) {
  EXPECT_EQ(hmr_domain_close(domain), 0) << "allocation " << nth << ": " << hmr_last_error();
  EXPECT_EQ(nic.held.load(), 0) << "allocation " << nth << " failed: registrations left at the NIC";
}

// What the process does once, before any test arms a failure: the first domain loads the
// vendor runtimes (the real ROCr's constructors allocate, and abort on bad_alloc: not hmr's to
// answer for) and starts the monitor.  Each test then fails what every call does.
class OutOfMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    CountingNic nic;
    hmr_nic_callbacks callbacks =
        hmr_test::callback_nic(&nic, 0, counting_register, counting_deregister);
    hmr_domain* domain = open_counting_domain(callbacks);
    ASSERT_NE(domain, nullptr);
    hmr_test::Pages pages(kPage);
    { hmr_test::MrPtr mr = hmr_test::reg(domain, pages.data(), kPage, kAccess); }
    close_and_check(domain, nic, 0);
    // And the first device registration loads the (fake) CUDA driver.
    hmr_nic_callbacks dmabuf_callbacks =
        hmr_test::callback_nic(&nic, HMR_NIC_CB_DMABUF, counting_register, counting_deregister);
    domain = open_counting_domain(dmabuf_callbacks);
    ASSERT_NE(domain, nullptr);
    hmr_hmem_test::FakeAllocation allocation(0, 65536);
    { hmr_test::MrPtr mr = hmr_hmem_test::register_ok(domain, allocation.get(), 65536); }
    close_and_check(domain, nic, 0);
  }
};

// Fails each allocation of hmr_domain_open(`attr`) in turn: a domain is made whole or not
// at all, and one that opened closes.
void fail_each_allocation_of_a_domain_open(const hmr_domain_attr& attr, const char* what) {
  uint64_t nth = 1;
  for (; nth < kMostRounds; ++nth) {
    hmr_domain_attr in = attr;
    hmr_domain* domain = nullptr;
    fail_nth(nth);
    const int rc = hmr_domain_open(&in, &domain);
    const bool failed = disarm();
    expect_success_or_enomem(rc, nth, what);
    if (rc == 0) {
      EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
    } else {
      EXPECT_EQ(domain, nullptr);
    }
    if (::testing::Test::HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << what << " allocated nothing: this test proves nothing";
}

// A domain on a callback NIC: its caches, monitor and pools.
TEST_F(OutOfMemory, EachAllocationOfADomainOpenFailsCleanly) {
  CountingNic nic;
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(&nic, 0, counting_register, counting_deregister);
  fail_each_allocation_of_a_domain_open(hmr_test::callback_domain_attr(callbacks, kAppMode),
                                        "hmr_domain_open");
}

// A libfabric domain (tcp on the loopback), which hmr opens itself: its fabric, domain and
// address vector are closed again whatever allocation failed.  (libfabric's own allocations
// are malloc's, not failed here; the ofi adapter's are.)
TEST_F(OutOfMemory, EachAllocationOfAnOfiDomainOpenFailsCleanly) {
  hmr_domain_attr attr = hmr_test::domain_attr(kAppMode | HMR_MR_ALLOCATED,
                                               "provider=tcp;domain=lo;fabric=127.0.0.1/32");
  attr.nic = "ofi";
  fail_each_allocation_of_a_domain_open(attr, "hmr_domain_open (ofi)");
}

// Fails each allocation of one registration miss in turn, on a fresh domain over a callback
// NIC with `caps` (and hmr_domain_attr.flags `flags`) each time: `reg` registers (returning its
// rc), and a success must take `path`.  Returns how many rounds it took (the last met no
// failure).
template <typename Register>
uint64_t fail_each_allocation_of_a_miss(uint64_t caps, hmr_mr_path path, Register&& reg,
                                        uint64_t flags = 0) {
  uint64_t nth = 1;
  for (; nth < kMostRounds; ++nth) {
    CountingNic nic;
    hmr_nic_callbacks callbacks =
        hmr_test::callback_nic(&nic, caps, counting_register, counting_deregister);
    hmr_domain* domain = open_counting_domain(callbacks, flags);
    if (domain == nullptr) break;
    hmr_mr* mr = nullptr;
    fail_nth(nth);
    const int rc = reg(domain, &mr);
    const bool failed = disarm();
    expect_success_or_enomem(rc, nth, "the registration");
    // Counted as what it was: a failed registration is an error in the statistics (the
    // shared-handle path's give-back did not count one when the cache threw).
    hmr_domain_stats stats{};
    stats.size = sizeof stats;
    EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
    EXPECT_EQ(stats.registrations, rc == 0 ? 1u : 0u) << "allocation " << nth;
    EXPECT_EQ(stats.registration_errors, rc == 0 ? 0u : 1u) << "allocation " << nth;
    if (rc == 0) {
      EXPECT_EQ(hmr_hmem_test::mr_info(mr).path, path);
      EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    } else {
      EXPECT_EQ(mr, nullptr);
    }
    close_and_check(domain, nic, nth);
    if (::testing::Test::HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << "the registration allocated nothing: this test proves nothing";
  return nth;
}

// A miss: the first registration of a range (the cache's entry, the index, the monitor's
// subscription, the MR's handle).
TEST_F(OutOfMemory, EachAllocationOfARegistrationMissFailsCleanly) {
  hmr_test::Pages pages(4 * kPage);
  fail_each_allocation_of_a_miss(0, HMR_MR_PATH_ADDRESS, [&](hmr_domain* domain, hmr_mr** mr) {
    return hmr_mr_reg(domain, pages.data(), 2 * kPage, kAccess, 0, 0, 0, mr, nullptr);
  });
}

// A miss of device memory (fake CUDA): the allocation's dma-buf export, shared by every
// registration of it, and the record of what the registration holds.  That record's failure
// left the NIC's registration behind, over an export closed under it; and a failure after the
// MR's slot was taken left the domain counting an MR nobody could close.
TEST_F(OutOfMemory, EachAllocationOfADeviceRegistrationMissFailsCleanly) {
  hmr_hmem_test::FakeAllocation allocation(0, 65536);
  fail_each_allocation_of_a_miss(HMR_NIC_CB_DMABUF, HMR_MR_PATH_DMABUF,
                                 [&](hmr_domain* domain, hmr_mr** mr) {
    return hmr_hmem_test::register_attr(domain, allocation.get(), 65536, HMR_HMEM_SYSTEM, 0, 0,
                                        mr);
  });
}

// The same where copies are allowed: out of memory on the dma-buf path is the call's answer,
// not a reason to try the next path (a host shadow, a copy that would then stay cached for the
// allocation): every success is still a dma-buf registration.
TEST_F(OutOfMemory, OutOfMemoryOnTheDmabufPathTakesNoHostShadow) {
  hmr_hmem_test::FakeAllocation allocation(0, 65536);
  fail_each_allocation_of_a_miss(
      HMR_NIC_CB_DMABUF, HMR_MR_PATH_DMABUF,
      [&](hmr_domain* domain, hmr_mr** mr) {
        return hmr_hmem_test::register_attr(domain, allocation.get(), 65536, HMR_HMEM_SYSTEM, 0,
                                            0, mr);
      },
      HMR_DOMAIN_ALLOW_HMEM_COPY);
}

// A hit and its close, on a domain whose cache holds the range, each round on a thread of its
// own: a thread's first hit fills its pool of MR records (what later hits take without
// allocating anything).  A failed hit leaves the entry as it was, counted by nobody, and a
// close that fails for memory still closes (the close rule, hmr.h: only EBUSY leaves it open).
TEST_F(OutOfMemory, EachAllocationOfAThreadsFirstHitAndItsCloseFailsCleanly) {
  hmr_test::Pages pages(4 * kPage);
  CountingNic nic;
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(&nic, 0, counting_register, counting_deregister);
  hmr_domain* domain = open_counting_domain(callbacks);
  ASSERT_NE(domain, nullptr);
  {
    hmr_test::MrPtr first = hmr_test::reg(domain, pages.data(), 2 * kPage, kAccess);
    ASSERT_TRUE(first);
  }
  uint64_t nth = 1;
  for (; nth < kMostRounds; ++nth) {
    int rc = 0, close_rc = 0;
    bool failed = false;
    std::thread([&] {
      hmr_mr* mr = nullptr;
      fail_nth(nth);
      rc = hmr_mr_reg(domain, pages.data(), 2 * kPage, kAccess, 0, 0, 0, &mr, nullptr);
      close_rc = rc == 0 ? hmr_mr_close(mr) : 0;
      failed = disarm();
      if (rc != 0) {
        EXPECT_STRNE(hmr_last_error(), "") << "allocation " << nth;
      }
    }).join();
    if (rc != 0) {
      EXPECT_EQ(rc, -HMR_ENOMEM) << "hmr_mr_reg (a hit), allocation " << nth;
    }
    EXPECT_NE(close_rc, -HMR_EBUSY) << "allocation " << nth;
    EXPECT_EQ(nic.held.load(), 1) << "allocation " << nth << ": the cached registration";
    if (HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << "a thread's first hit allocated nothing: this test proves nothing";
  const hmr_domain_stats stats = hmr_test::domain_stats(domain);
  EXPECT_EQ(stats.nic_registrations, 1u) << "a failed hit registered the range again";
  close_and_check(domain, nic, nth);
}

// An asynchronous registration runs on hmr's worker thread, where an exception would end the
// process and a lost completion would leave the application waiting for it.  The NIC's reg_va,
// which runs there, arms the worker's `arm`-th allocation after it (its record, the cache's
// entry, the MR's state: everything but posting the completion, whose room the registering
// call took).  Each in turn: the event is a completion or an error entry with HMR_ENOMEM, and
// the NIC holds nothing once the domain (and with it the worker) is gone.
struct WorkerArmingNic : CountingNic {
  uint64_t arm = 0;
};

int arming_register(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr,
                    char* reason, size_t reason_size) {
  const int rc = counting_register(context, request, mr, reason, reason_size);
  fail_nth(static_cast<WorkerArmingNic*>(context)->arm);
  return rc;
}

TEST_F(OutOfMemory, EachAllocationOfAnAsynchronousRegistrationOnTheWorkerFailsCleanly) {
  hmr_test::Pages pages(4 * kPage);
  uint64_t nth = 1;
  for (; nth < kMostRounds; ++nth) {
    WorkerArmingNic nic;
    nic.arm = nth;
    hmr_nic_callbacks callbacks =
        hmr_test::callback_nic(&nic, 0, arming_register, counting_deregister);
    hmr_eq_attr queue_attr{};
    queue_attr.size = sizeof queue_attr;
    hmr_eq* queue = nullptr;
    ASSERT_EQ(hmr_eq_open(&queue_attr, &queue), 0) << hmr_last_error();
    hmr_domain* domain = open_counting_domain(callbacks);
    ASSERT_NE(domain, nullptr);
    ASSERT_EQ(hmr_domain_bind(domain, reinterpret_cast<hmr_fid*>(queue), HMR_REG_MR), 0)
        << hmr_last_error();
    const uint64_t failures_before = hmr_test::allocation_failure::failures_made();
    hmr_mr* mr = nullptr;
    ASSERT_EQ(hmr_mr_reg(domain, pages.data(), 2 * kPage, kAccess, 0, 0, 0, &mr, nullptr), 0)
        << hmr_last_error();
    uint32_t event = 0;
    hmr_eq_entry entry{};
    const int read = hmr_eq_sread(queue, &event, &entry, 10000, 0);
    if (read == -HMR_EAVAIL) {
      hmr_eq_err_entry error{};
      ASSERT_EQ(hmr_eq_readerr(queue, &error, 0), 1);
      EXPECT_EQ(error.err, HMR_ENOMEM) << "allocation " << nth << " on the worker";
    } else {
      EXPECT_EQ(read, 1) << "allocation " << nth << " on the worker: " << hmr_last_error();
      EXPECT_EQ(event, static_cast<uint32_t>(HMR_MR_COMPLETE));
    }
    EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    close_and_check(domain, nic, nth);
    EXPECT_EQ(hmr_eq_close(queue), 0) << hmr_last_error();
    const bool failed = hmr_test::allocation_failure::failures_made() != failures_before;
    if (HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << "the worker allocated nothing after the NIC: this test proves nothing";
}

// The cache's index grows (a new table, allocated while a registration is being filed) with
// no memory for it: the registration is still made and handed out, uncached.  An exception out
// of the growth left the NIC's registration behind (nothing deregistered it, not even the
// domain's close), and the caller got HMR_ENOMEM for it.  Each MR is closed at once, so the
// entries that were filed stay idle in the cache and the MR records are reused: the index is
// the one thing that grows.
TEST_F(OutOfMemory, AnIndexThatCannotGrowStillHandsOutRegistrations) {
  constexpr size_t kRegions = 256;  // far past the first table's room (48 slots)
  hmr_test::Pages pages(2 * kRegions * kPage);
  CountingNic nic;
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(&nic, 0, counting_register, counting_deregister);
  hmr_domain* domain = open_counting_domain(callbacks);
  ASSERT_NE(domain, nullptr);
  // The cache's first slab of entries (room for 512) comes with its first registration.
  {
    hmr_test::MrPtr first = hmr_test::reg(domain, pages.data(), kPage, kAccess);
    ASSERT_TRUE(first);
  }
  std::vector<int> outcomes;  // (recorded while armed; looked at after)
  outcomes.reserve(2 * kRegions);
  // Every allocation of 3 KiB or more fails: the index's first larger table is 97 slots of
  // 32 bytes; the records an MR needs are far smaller.
  fail_at_least(3000);
  for (size_t i = 1; i < kRegions; ++i) {
    hmr_mr* mr = nullptr;
    const int rc = hmr_mr_reg(domain, pages.data() + 2 * i * kPage, kPage, kAccess, 0, 0, 0, &mr,
                              nullptr);
    outcomes.push_back(rc);
    outcomes.push_back(rc == 0 ? hmr_mr_close(mr) : 0);
  }
  const bool failed = disarm();
  EXPECT_TRUE(failed) << "no allocation was large enough to fail: this test proves nothing";
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i], 0) << (i % 2 ? "hmr_mr_close" : "hmr_mr_reg") << " of region "
                              << i / 2 + 1;
  }
  EXPECT_GT(hmr_test::domain_stats(domain).cache_uncached, 0u) << "nothing was handed out uncached";
  close_and_check(domain, nic, 0);
}

}  // namespace
