// CreditPool: a limit of N admits exactly N holders across threads, whichever thread's slot the
// spare credits are parked in, and every credit given back can be taken again.
#include "util/credit_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace hmr {
namespace {

TEST(CreditPool, NoLimitAlwaysAdmits) {
  CreditPool pool(0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pool.take());
}

TEST(CreditPool, AdmitsExactlyTheLimitOnOneThread) {
  for (uint64_t limit : {1u, 2u, 31u, 32u, 33u, 100u}) {
    CreditPool pool(limit);
    for (uint64_t i = 0; i < limit; ++i) ASSERT_TRUE(pool.take()) << "limit " << limit << " take " << i;
    EXPECT_FALSE(pool.take()) << "limit " << limit;
    pool.give();
    EXPECT_TRUE(pool.take()) << "limit " << limit << ": a credit given back is lost";
    EXPECT_FALSE(pool.take());
  }
}

TEST(CreditPool, CreditsParkedInAnotherThreadsSlotAreReclaimed) {
  CreditPool pool(10);
  // Another thread takes one and gives it back: the batch it took stays parked in its slot.
  std::thread([&] {
    ASSERT_TRUE(pool.take());
    pool.give();
  }).join();
  EXPECT_EQ(pool.spare(), 10u);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool.take()) << i;
  EXPECT_FALSE(pool.take());
}

TEST(CreditPool, ManyThreadsNeverHoldMoreThanTheLimitAndLoseNothing) {
  constexpr uint64_t kLimit = 50;
  constexpr int kThreads = 4;
  CreditPool pool(kLimit);
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<int> mine;
      for (int i = 0; i < 20000; ++i) {
        if ((i / 40) % 2 == 0) {
          if (pool.take()) {
            const int64_t now = held.fetch_add(1) + 1;
            int64_t seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            mine.push_back(i);
          }
        } else if (!mine.empty()) {
          mine.pop_back();
          held.fetch_sub(1);
          pool.give();
        }
      }
      for (size_t i = 0; i < mine.size(); ++i) {
        held.fetch_sub(1);
        pool.give();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most.load(), static_cast<int64_t>(kLimit));
  EXPECT_EQ(held.load(), 0);
  EXPECT_EQ(pool.spare(), kLimit) << "credits lost or made up";
  for (uint64_t i = 0; i < kLimit; ++i) ASSERT_TRUE(pool.take()) << i;
  EXPECT_FALSE(pool.take());
}

// The limit is exact under threads too: 4 threads, each holding at most its share of the
// limit, are never refused, however the spare credits travel between slots and the pool (a
// batch on its way between them while a dry thread reclaims must not be taken for missing).
TEST(CreditPool, ThreadsWithinTheirShareAreNeverRefused) {
  for (const uint64_t share : {1u, 4u, 16u}) {
    constexpr int kThreads = 4;
    CreditPool pool(share * kThreads);
    std::atomic<int> refused{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // all at once
        uint64_t held = 0;
        unsigned state = 12345u + static_cast<unsigned>(t);
        for (int i = 0; i < 100000; ++i) {
          state = state * 1103515245u + 12345u;
          if (held < share && (held == 0 || (state >> 16) % 2 == 0)) {
            if (pool.take()) {
              ++held;
            } else {
              refused.fetch_add(1);
            }
          } else {
            --held;
            pool.give();
          }
        }
        for (; held != 0; --held) pool.give();
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(refused.load(), 0) << "share " << share;
    EXPECT_EQ(pool.spare(), share * kThreads) << "share " << share;
  }
}

}  // namespace
}  // namespace hmr
