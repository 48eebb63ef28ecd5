// Out of memory on hmr's own threads and on the paths that tell caches of freed memory, where
// an exception has no caller to reach: on the deferred-deregistration thread (the reaper) it
// ends the process; in the middle of telling several caches of one invalidation it leaves
// some untold (a stale registration) or a monitor slot pinned for ever (a domain close that
// never returns).  The allocator arms only the thread that asks (failing_allocator.h), so the
// reaper is armed from inside the callback NIC's dereg, which hmr calls there.
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/failing_allocator.h"
#include "tests/api/out_of_memory_common.h"
#include "tests/api/test_support.h"

namespace {

using hmr_test::allocation_failure::disarm;
using hmr_test::allocation_failure::fail_at_least;
using hmr_test::allocation_failure::fail_nth;
using hmr_test::allocation_failure::failures_made;

using hmr_test::out_of_memory::kAccess;
using hmr_test::out_of_memory::kAppMode;
using hmr_test::out_of_memory::kPage;

// Waits (yielding) until `done` says so; false after ~10 s of waiting: the event never came.
template <typename Done>
bool wait_until(Done&& done) {
  for (uint64_t rounds = 0; rounds < (1ull << 26); ++rounds) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

// A callback NIC whose dereg, on the thread hmr calls it from, arms every allocation of that
// thread to fail the first time (and answers `first_answer`), and disarms it the second time,
// noting how many allocations failed in between.
struct ReaperArmingNic {
  std::atomic<int64_t> held{0};
  std::atomic<uint64_t> next_key{1};
  int first_answer = 0;
  std::atomic<int> arming{0};           // 0: not armed yet, 1: armed, 2: disarmed
  std::atomic<int> deregistrations{0};  // published after each step's fields
  std::thread::id first_thread, second_thread;
  uint64_t failures_at_arming = 0;
  std::atomic<uint64_t> failures_while_armed{0};
};

int arming_nic_register(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*,
                        size_t) {
  auto& nic = *static_cast<ReaperArmingNic*>(context);
  nic.held.fetch_add(1);
  return hmr_test::hand_out_key(mr, nic.next_key);
}

int arming_nic_deregister(void* context, const hmr_nic_mr*, char* reason, size_t reason_size) {
  auto& nic = *static_cast<ReaperArmingNic*>(context);
  nic.held.fetch_sub(1);  // (a refusal drops the registration too: hmr cannot retry it)
  int call = 0;
  if (nic.arming.compare_exchange_strong(call, 1)) {  // (one thread arms, whatever comes)
    nic.first_thread = std::this_thread::get_id();
    nic.failures_at_arming = failures_made();
    fail_at_least(1);
    nic.deregistrations.store(1);
    if (nic.first_answer == 0) return 0;
    std::snprintf(reason, reason_size, "the NIC refused");  // (a char buffer: no allocation)
    return nic.first_answer;
  }
  if (call == 1 && nic.arming.compare_exchange_strong(call, 2)) {
    (void)disarm();
    nic.second_thread = std::this_thread::get_id();
    nic.failures_while_armed.store(failures_made() - nic.failures_at_arming);
    nic.deregistrations.store(2);
  }
  return 0;
}

// Registers a page of its own (mapped here), closes the MR (the entry stays cached, idle) and
// unmaps the page: the monitor's thread drops the entry and leaves its deregistration to the
// reaper.
void cache_and_unmap_a_page(hmr_domain* domain) {
  void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  static_cast<char*>(page)[0] = 1;
  {
    hmr_test::MrPtr mr = hmr_test::reg(domain, page, kPage, kAccess);
    ASSERT_TRUE(mr);
  }
  ASSERT_EQ(munmap(page, kPage), 0);
}

// Two memory frees the reaper deregisters: the first arms it, the second disarms it.
void run_two_reaper_rounds(ReaperArmingNic& nic) {
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(&nic, 0, arming_nic_register, arming_nic_deregister);
  hmr_domain_attr attr = hmr_test::callback_domain_attr(callbacks, kAppMode);
  attr.cache_monitor = "userfaultfd";
  hmr_domain* domain = nullptr;
  const int opened = hmr_domain_open(&attr, &domain);
  if (opened == -HMR_ENOSYS || opened == -HMR_EPERM) GTEST_SKIP() << hmr_last_error();
  ASSERT_EQ(opened, 0) << hmr_last_error();
  // Closed however this ends (an ASSERT returning early left the domain open, its reaper
  // armed for the later tests and the NIC on this stack under its cache).
  struct CloseAtExit {
    hmr_domain*& domain;
    ~CloseAtExit() {
      if (domain != nullptr) {
        EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
      }
    }
  } close_at_exit{domain};
  cache_and_unmap_a_page(domain);
  ASSERT_TRUE(wait_until([&] { return nic.deregistrations.load() >= 1; }))
      << "the reaper never deregistered the unmapped page's registration";
  // The reaper is armed now.  The next round: the old reaper copied its list of caches first
  // (a bad_alloc out of its thread: std::terminate).
  cache_and_unmap_a_page(domain);
  ASSERT_TRUE(wait_until([&] { return nic.deregistrations.load() >= 2; }))
      << "the reaper's second round never came (it died, or waits)";
  EXPECT_NE(nic.first_thread, std::this_thread::get_id()) << "not deregistered by the reaper";
  EXPECT_EQ(nic.second_thread, nic.first_thread) << "not the same thread";
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
  domain = nullptr;
  EXPECT_EQ(nic.held.load(), 0);
}

TEST(OutOfMemoryOnHmrsThreads, TheReaperAllocatesNothingBetweenDeregistrations) {
  ReaperArmingNic nic;
  run_two_reaper_rounds(nic);
  EXPECT_EQ(nic.failures_while_armed.load(), 0u)
      << "the reaper allocated between two deregistrations: an allocation failure there ends "
         "the process";
}

// The NIC refuses a deregistration on the reaper and there is no memory for hmr to say why:
// the refusal is logged with what could be said, and the reaper goes on.  The reason's
// allocation threw out of the thread (std::terminate).
TEST(OutOfMemoryOnHmrsThreads, ARefusedDeregistrationWithNoMemoryForItsReasonKeepsTheReaper) {
  ReaperArmingNic nic;
  nic.first_answer = -HMR_EIO;
  run_two_reaper_rounds(nic);
  EXPECT_GE(nic.failures_while_armed.load(), 1u)
      << "the refusal's reason allocated nothing: this test proves nothing";
}

struct CountingNic {
  std::atomic<int64_t> held{0};
  std::atomic<uint64_t> next_key{1};
  std::atomic<uint64_t> registrations{0};
};

int counting_register(void* context, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
  auto& nic = *static_cast<CountingNic*>(context);
  nic.held.fetch_add(1);
  nic.registrations.fetch_add(1);
  return hmr_test::hand_out_key(mr, nic.next_key);
}

int counting_deregister(void* context, const hmr_nic_mr*, char*, size_t) {
  static_cast<CountingNic*>(context)->held.fetch_sub(1);
  return 0;
}

// Opens `count` callback domains on `nics`, each with an idle cached registration of `page`.
void open_domains_caching(CountingNic* nics, std::vector<hmr_nic_callbacks>& callbacks,
                          hmr_domain** domains, int count, void* page) {
  callbacks.reserve(count);
  for (int d = 0; d < count; ++d) {
    callbacks.push_back(hmr_test::callback_nic(&nics[d], 0, counting_register, counting_deregister));
    hmr_domain_attr attr = hmr_test::callback_domain_attr(callbacks.back(), kAppMode);
    ASSERT_EQ(hmr_domain_open(&attr, &domains[d]), 0) << hmr_last_error();
    hmr_test::MrPtr mr = hmr_test::reg(domains[d], page, kPage, kAccess);
    ASSERT_TRUE(mr);
  }
}

// Each domain dropped the range (its next registration of it reaches its NIC) and its NIC got
// the old registration back (from the call, or from the reaper it was left to).
void expect_every_domain_told(CountingNic* nics, hmr_domain** domains, int count, void* page,
                              const char* when) {
  for (int d = 0; d < count; ++d) {
    EXPECT_TRUE(wait_until([&] { return nics[d].held.load() == 0; }))
        << when << ", domain " << d << ": the registration was never given back";
    const uint64_t before = nics[d].registrations.load();
    hmr_test::MrPtr mr = hmr_test::reg(domains[d], page, kPage, kAccess);
    EXPECT_TRUE(mr);
    EXPECT_EQ(nics[d].registrations.load(), before + 1)
        << when << ", domain " << d << ": a hit on the invalidated range";
  }
}

// hmr_mem_invalidate(NULL, ...) tells every domain's caches; each that dropped an entry is
// kept aside (a pin on its monitor slot) and deregisters once the monitor's lock is released.
// Each allocation of the call fails in turn.  Every domain must have dropped the range (its
// next registration of it reaches the NIC), every NIC gets its registration back, and every
// domain closes.  Keeping the third cache aside threw after two were pinned: their pins were
// never given back, and the domains' closes waited for them for ever; the first throw left
// the second and third domains holding the old registration.
TEST(OutOfMemoryOnHmrsThreads, EachAllocationOfAnInvalidationOfEveryDomainFailsCleanly) {
  constexpr int kDomains = 3;
  hmr_test::Pages pages(kPage);
  uint64_t nth = 1;
  constexpr uint64_t kMostRounds = 200;
  for (; nth < kMostRounds; ++nth) {
    CountingNic nics[kDomains];
    std::vector<hmr_nic_callbacks> callbacks;
    hmr_domain* domains[kDomains] = {};
    open_domains_caching(nics, callbacks, domains, kDomains, pages.data());
    fail_nth(nth);
    const int rc = hmr_mem_invalidate(nullptr, pages.data(), kPage);
    const bool failed = disarm();
    if (rc != 0) {
      EXPECT_EQ(rc, -HMR_ENOMEM) << "allocation " << nth << ": " << hmr_last_error();
    } else {
      const std::string when = "allocation " + std::to_string(nth);
      expect_every_domain_told(nics, domains, kDomains, pages.data(), when.c_str());
    }
    for (hmr_domain* domain : domains) {
      if (domain != nullptr) {
        EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
      }
    }
    for (const CountingNic& nic : nics) EXPECT_EQ(nic.held.load(), 0);
    if (::testing::Test::HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << "the invalidation allocated nothing: this test proves nothing";
}

// With no memory at all (every allocation of the invalidating thread fails), the list of
// caches to deregister after the lock cannot be made: each cache's deregistrations go to the
// reaper, and every cache is still told.
TEST(OutOfMemoryOnHmrsThreads, AnInvalidationWithNoMemoryAtAllStillTellsEveryDomain) {
  constexpr int kDomains = 3;
  hmr_test::Pages pages(kPage);
  CountingNic nics[kDomains];
  std::vector<hmr_nic_callbacks> callbacks;
  hmr_domain* domains[kDomains] = {};
  open_domains_caching(nics, callbacks, domains, kDomains, pages.data());
  fail_at_least(1);
  const int rc = hmr_mem_invalidate(nullptr, pages.data(), kPage);
  const bool failed = disarm();
  EXPECT_TRUE(failed) << "the invalidation allocated nothing: this test proves nothing";
  EXPECT_EQ(rc, 0) << hmr_last_error();
  expect_every_domain_told(nics, domains, kDomains, pages.data(), "no memory");
  for (hmr_domain* domain : domains) {
    if (domain != nullptr) {
      EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
    }
  }
  for (const CountingNic& nic : nics) EXPECT_EQ(nic.held.load(), 0);
}

}  // namespace
