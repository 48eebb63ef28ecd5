// Concurrency on one HMR_THREAD_SAFE domain: workers register, move bytes through a shared
// pair of endpoints, verify and close in a loop, while another thread churns requested keys
// from a small shared key space.  Built to run clean under ThreadSanitizer
// (-DHMR_SANITIZE=thread with clang).  No sleeps: threads start together on a latch.
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using hmr_test::domain_attr;
using hmr_test::Pages;

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr int kWorkers = 4;
constexpr int kIterations = 300;
constexpr int kKeyChurnIterations = 1200;
constexpr uint64_t kSharedKeys = 6;  // requested keys 1..6, contended
constexpr size_t kKeyChurnWindow = 2;  // MRs the churn thread keeps open at once

// What a thread saw, reported by the main thread after join (one message, not thousands).
struct ThreadReport {
  uint64_t successes = 0;
  uint64_t enokey = 0;
  uint64_t failures = 0;
  std::string first_failure;
  void fail(const std::string& what) {
    if (failures++ == 0) first_failure = what;
  }
};

std::string describe(const char* call, int rc, int thread, int iteration) {
  const std::string reason = hmr_last_error();  // before any other hmr call
  return std::string(call) + " returned " + std::to_string(rc) + " (" + hmr_strerror(rc) +
         ": " + reason + ") in thread " + std::to_string(thread) + ", iteration " +
         std::to_string(iteration);
}

void worker(hmr_domain* domain, hmr_ep* initiator, int thread, std::latch& start,
            ThreadReport& report) {
  Pages target(kPage);
  if (target.data() == nullptr) {
    report.fail("mmap failed");
    start.count_down();
    return;
  }
  std::vector<uint8_t> source(256);
  std::vector<uint8_t> sink(256);
  start.arrive_and_wait();
  for (int i = 0; i < kIterations && report.failures == 0; ++i) {
    // Keys of workers never meet the churn thread's 1..kSharedKeys nor each other.
    const uint64_t key = (static_cast<uint64_t>(thread + 1) << 32) | static_cast<uint64_t>(i);
    for (size_t b = 0; b < source.size(); ++b) {
      source[b] = static_cast<uint8_t>(thread * 61 + i * 7 + b);
    }
    const uint64_t offset = (static_cast<uint64_t>(i) * 40) % (kPage - source.size());

    hmr_mr* mr = nullptr;
    int rc = hmr_mr_reg(domain, target.data(), kPage, kRemote, 0, key, 0, &mr, nullptr);
    if (rc != 0 || mr == nullptr) {
      report.fail(describe("hmr_mr_reg", rc, thread, i));
      break;
    }
    ++report.successes;
    if (hmr_mr_key(mr) != key) report.fail("hmr_mr_key differs from the requested key");

    rc = hmr_ep_write(initiator, source.data(), source.size(), nullptr, offset, key);
    if (rc != 0) {
      report.fail(describe("hmr_ep_write", rc, thread, i));
    } else if (std::memcmp(target.data() + offset, source.data(), source.size()) != 0) {
      report.fail("written bytes differ in thread " + std::to_string(thread) + ", iteration " +
                  std::to_string(i));
    }
    std::memset(sink.data(), 0, sink.size());
    rc = hmr_ep_read(initiator, sink.data(), sink.size(), nullptr, offset, key);
    if (rc != 0) {
      report.fail(describe("hmr_ep_read", rc, thread, i));
    } else if (sink != source) {
      report.fail("read-back bytes differ in thread " + std::to_string(thread) + ", iteration " +
                  std::to_string(i));
    }

    rc = hmr_mr_close(mr);
    if (rc != 0) report.fail(describe("hmr_mr_close", rc, thread, i));
  }
}

// Registers and closes with requested keys from 1..kSharedKeys, keeping a few MRs open, so
// requests collide with keys in use: -HMR_ENOKEY is expected, anything else is a failure.
void key_churn(hmr_domain* domain, std::latch& start, ThreadReport& report) {
  Pages pages(kKeyChurnWindow * kPage + kPage);
  if (pages.data() == nullptr) {
    report.fail("mmap failed");
    start.count_down();
    return;
  }
  std::deque<hmr_mr*> open;
  uint64_t lcg = 12345;
  start.arrive_and_wait();
  for (int i = 0; i < kKeyChurnIterations && report.failures == 0; ++i) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t key = 1 + (lcg >> 33) % kSharedKeys;
    uint8_t* buf = pages.data() + (static_cast<size_t>(i) % (kKeyChurnWindow + 1)) * kPage;
    hmr_mr* mr = nullptr;
    const int rc = hmr_mr_reg(domain, buf, kPage, kRemote, 0, key, 0, &mr, nullptr);
    if (rc == 0 && mr != nullptr) {
      ++report.successes;
      if (hmr_mr_key(mr) != key) report.fail("hmr_mr_key differs from the requested key");
      open.push_back(mr);
    } else if (rc == -HMR_ENOKEY) {
      ++report.enokey;
      if (mr != nullptr) report.fail("*mr written on failure");
    } else {
      report.fail(describe("hmr_mr_reg (shared key space)", rc, -1, i));
    }
    if (open.size() > kKeyChurnWindow || (rc != 0 && !open.empty())) {
      const int close_rc = hmr_mr_close(open.front());
      if (close_rc != 0) report.fail(describe("hmr_mr_close", close_rc, -1, i));
      open.pop_front();
    }
  }
  for (hmr_mr* mr : open) {
    const int rc = hmr_mr_close(mr);
    if (rc != 0) report.fail(describe("hmr_mr_close", rc, -1, kKeyChurnIterations));
  }
}

TEST(Threading, ConcurrentRegistrationRmaAndKeyChurnOnOneDomain) {
  hmr_domain_attr attr = domain_attr(0, nullptr);
  attr.threading = HMR_THREAD_SAFE;
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  EXPECT_EQ(attr.threading, HMR_THREAD_SAFE);
  EXPECT_EQ(attr.mr_mode, 0u);  // requested keys, offsets

  hmr_ep* target = nullptr;
  hmr_ep* initiator = nullptr;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, &target));
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, &initiator));
  ASSERT_HMR_OK(hmr_ep_connect(initiator, target));

  std::vector<ThreadReport> reports(kWorkers + 1);
  {
    std::latch start(kWorkers + 1);
    std::vector<std::thread> threads;
    for (int t = 0; t < kWorkers; ++t) {
      threads.emplace_back(worker, domain, initiator, t, std::ref(start), std::ref(reports[t]));
    }
    threads.emplace_back(key_churn, domain, std::ref(start), std::ref(reports[kWorkers]));
    for (std::thread& thread : threads) thread.join();
  }

  uint64_t successes = 0;
  for (int t = 0; t <= kWorkers; ++t) {
    const ThreadReport& report = reports[t];
    EXPECT_EQ(report.failures, 0u) << (t < kWorkers ? "worker " : "key churn ") << t << ": "
                                   << report.first_failure;
    successes += report.successes;
  }
  for (int t = 0; t < kWorkers; ++t) EXPECT_EQ(reports[t].successes, uint64_t{kIterations}) << t;
  const ThreadReport& churn = reports[kWorkers];
  EXPECT_GT(churn.successes, 0u);
  EXPECT_GT(churn.enokey, 0u) << "the shared key space never collided";
  EXPECT_EQ(churn.successes + churn.enokey, uint64_t{kKeyChurnIterations});

  struct hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain, &stats));
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.mr_bytes, 0u);
  EXPECT_EQ(stats.registrations, successes);

  EXPECT_EQ(hmr_ep_close(initiator), 0) << hmr_last_error();
  EXPECT_EQ(hmr_ep_close(target), 0) << hmr_last_error();
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
}

// Many threads opening and closing their own domains, endpoints and counters at once.
TEST(Threading, ObjectsOpenAndCloseConcurrently) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  std::vector<ThreadReport> reports(kThreads);
  {
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, &start, &report = reports[t]] {
        Pages pages(kPage);
        start.arrive_and_wait();
        for (int i = 0; i < kRounds && report.failures == 0; ++i) {
          hmr_domain_attr attr = domain_attr(0, nullptr);
          hmr_domain* domain = nullptr;
          int rc = hmr_domain_open(&attr, &domain);
          if (rc != 0) {
            report.fail(describe("hmr_domain_open", rc, t, i));
            break;
          }
          hmr_ep* ep = nullptr;
          hmr_cntr* cntr = nullptr;
          hmr_mr* mr = nullptr;
          rc = hmr_ep_open(domain, nullptr, &ep);
          if (rc != 0) report.fail(describe("hmr_ep_open", rc, t, i));
          rc = hmr_cntr_open(domain, nullptr, &cntr);
          if (rc != 0) report.fail(describe("hmr_cntr_open", rc, t, i));
          rc = hmr_mr_reg(domain, pages.data(), kPage, kRemote, 0, 1, 0, &mr, nullptr);
          if (rc != 0) report.fail(describe("hmr_mr_reg", rc, t, i));
          if (mr != nullptr && hmr_mr_close(mr) != 0) report.fail("hmr_mr_close");
          if (cntr != nullptr && hmr_cntr_close(cntr) != 0) report.fail("hmr_cntr_close");
          if (ep != nullptr && hmr_ep_close(ep) != 0) report.fail("hmr_ep_close");
          rc = hmr_domain_close(domain);
          if (rc != 0) report.fail(describe("hmr_domain_close", rc, t, i));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(reports[t].failures, 0u) << "thread " << t << ": " << reports[t].first_failure;
  }
}

}  // namespace
