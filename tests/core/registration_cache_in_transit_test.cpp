// What a registration refused under NIC pressure waits for (RegistrationCache::release_unused,
// docs/semantics.md "Under pressure"): entries on their way out that nobody but hmr waits for
// (a deregistration under way on another thread), and never an entry an open handle keeps —
// only the application's close lets that one go.  Before, an invalidated entry that an open
// MR kept counted as on its way out, and every refusal waited 2^20 rounds of membarrier for
// it (1.2 s on this machine) before it failed.
#include "tests/core/registration_cache_fixture.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace hmr::core {
namespace {

using namespace cache_test;

using Peer = RegistrationCacheTestPeer;

// An idle entry that hits on another thread mark recent again between the CLOCK hand's visits
// (here: one hit each time the hand meets it) is still given back under pressure.  The hand
// gave up after its three passes, and the refusal said every registration was in use.
TEST_F(RegistrationCacheTest, AnIdleEntryHitsKeepRecentIsStillGivenBack) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  std::atomic<int> asked{0}, hit{0};
  std::atomic<bool> stop{false};
  std::thread hitting([&] {
    while (!stop.load()) {
      if (hit.load() == asked.load()) {
        std::this_thread::yield();
        continue;
      }
      CacheHandle handle = get(page(0), kPage);
      if (handle) cache.put(handle);
      hit.fetch_add(1);
    }
  });
  const RegistrationCache::VictimFilter hit_first = [&](const CacheEntry&) {
    const int wanted = asked.fetch_add(1) + 1;
    while (hit.load() < wanted) std::this_thread::yield();
    return true;
  };
  EXPECT_EQ(cache.release_unused(1, &hit_first, /*then_wait_for_others=*/false), 1u);
  stop.store(true);
  hitting.join();
  EXPECT_GE(asked.load(), 2) << "the hand met the entry once: the test shows nothing";
  EXPECT_FALSE(backend_.is_live(id)) << "the idle entry was not given back";
  EXPECT_EQ(cache.statistics().cached_regions, 0u);
}

// Entries invalidated while held, by each kind of reference a holder may have: the miss's own
// (shared) reference, a hit counted in the owner's table, a hit counted in another thread's
// table (which the invalidation settles onto the held list), and, invalidated by another
// thread, a hit in the owner's table.  None is on its way out: nothing to wait for, nothing
// given back, every registration still live for its holder.
TEST_F(RegistrationCacheTest, AnEntryAHolderKeepsIsNotInTransit) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle shared = get(page(0), kPage);
  ASSERT_EQ(shared.counted_by, 0u) << "a miss hands out a shared reference";
  const uint64_t counted_id = touch(page(2), kPage);
  CacheHandle counted = get(page(2), kPage);
  ASSERT_NE(counted.counted_by, 0u) << "a hit on the thread that filed it is counted";
  const uint64_t elsewhere_id = touch(page(4), kPage);
  CacheHandle elsewhere;
  std::thread([&] { elsewhere = get(page(4), kPage); }).join();
  ASSERT_TRUE(elsewhere);
  const uint64_t remote_id = touch(page(6), kPage);
  CacheHandle remote = get(page(6), kPage);

  monitor_.notify(page(0), page(6));
  std::thread([&] { monitor_.notify(page(6), page(7)); }).join();
  EXPECT_EQ(cache.statistics().invalidations, 4u);
  EXPECT_EQ(Peer::in_transit(cache), 0u) << "open handles' entries counted as on their way out";
  EXPECT_EQ(cache.release_unused(4), 0u) << "nothing idle, nothing on its way out";
  for (const uint64_t id : {FakeBackend::id_of(shared), counted_id, elsewhere_id, remote_id}) {
    EXPECT_TRUE(backend_.is_live(id)) << "registration " << id << " went under its holder";
  }

  for (const CacheHandle* handle : {&shared, &counted, &elsewhere, &remote}) {
    const uint64_t id = FakeBackend::id_of(*handle);
    cache.put(*handle);
    EXPECT_FALSE(backend_.is_live(id)) << "the holder's put was the last";
    EXPECT_EQ(Peer::in_transit(cache), 0u);
  }
}

// The last put of an invalidated entry, deregistering on another thread: on its way out (a
// refusal's retry may succeed once it is done) until the NIC let go, and no longer after.
TEST_F(RegistrationCacheTest, ADeregistrationUnderWayIsInTransitUntilTheNicLetsGo) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle held = get(page(0), kPage);
  const uint64_t id = FakeBackend::id_of(held);
  monitor_.notify(page(0), page(1));
  ASSERT_EQ(Peer::in_transit(cache), 0u);

  std::atomic<bool> deregistering{false}, let_go{false};
  backend_.during_deregister = [&](uint64_t) {
    deregistering.store(true);
    while (!let_go.load()) std::this_thread::yield();
  };
  std::thread closer([&] { cache.put(held); });
  while (!deregistering.load()) std::this_thread::yield();
  EXPECT_EQ(Peer::in_transit(cache), 1u);
  EXPECT_TRUE(backend_.is_live(id));
  let_go.store(true);
  closer.join();
  EXPECT_FALSE(backend_.is_live(id));
  EXPECT_EQ(Peer::in_transit(cache), 0u);

  // A flush's deregistration alike (retire(), then the finalize in its finish()).
  backend_.during_deregister = nullptr;
  const uint64_t idle = touch(page(2), kPage);
  deregistering.store(false);
  let_go.store(false);
  backend_.during_deregister = [&](uint64_t) {
    deregistering.store(true);
    while (!let_go.load()) std::this_thread::yield();
  };
  std::thread flusher([&] { cache.flush(); });
  while (!deregistering.load()) std::this_thread::yield();
  EXPECT_EQ(Peer::in_transit(cache), 1u);
  let_go.store(true);
  flusher.join();
  EXPECT_FALSE(backend_.is_live(idle));
  EXPECT_EQ(Peer::in_transit(cache), 0u);
  backend_.during_deregister = nullptr;
}

// Another thread's deregistration (the last close of an invalidated entry) under way while a
// refusal finds nothing idle: the refusal waits for it and reports it given back.  `slow`
// stands for a NIC's dereg that needs nothing from the application but takes long (a verbs
// dereg of hundreds of GiB unpins for seconds).  With the wait's bound lowered to 64 rounds, a
// refusal that ends its wait at the bound returns after 64 rounds with nothing given back (it
// did, for a dereg that outlasted 2^20 rounds, 0.1-2 s here); one that waits for the NIC call
// returns 1.  So the dereg ends once the refusal has waited 16 times its bound, counted, not
// timed (under a 300 ms timer, a refusal kept off the CPU before it began to wait once found
// the dereg over, on a loaded CI machine), or once the refusal returned.  A callback NIC's
// dereg may wait for the application (a lock the refused caller holds): the wait for it ends
// at its bound, nothing given back, and the dereg ends when the refusal returned.  Either way
// 10 s is a safety net, should the two wait for each other.
struct SlowDeregistration {
  // 0: only the refusal's return ends the dereg.
  explicit SlowDeregistration(uint64_t rounds) : ends_after_rounds_waited(rounds) {}
  const uint64_t ends_after_rounds_waited;
  std::atomic<bool> deregistering{false}, refusal_returned{false};
  std::atomic<bool> waited_out{false}, stuck{false};  // why it ended, if not the return
  void run(const RegistrationCache& cache) {
    const uint64_t rounds_before = Peer::rounds_waited(cache);
    deregistering.store(true);
    const auto safety_net = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!refusal_returned.load()) {
      if (ends_after_rounds_waited != 0 &&
          Peer::rounds_waited(cache) - rounds_before >= ends_after_rounds_waited) {
        waited_out.store(true);
        return;
      }
      if (std::chrono::steady_clock::now() > safety_net) {
        stuck.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }
};

// `held`'s last close on another thread, its deregistration slow, while this thread's refusal
// finds nothing idle: how many the refusal reports given back.
size_t refusal_beside_slow_close(RegistrationCache& cache, FakeBackend& backend,
                                 CacheHandle& held, SlowDeregistration& slow) {
  backend.during_deregister = [&](uint64_t) { slow.run(cache); };
  std::thread closer([&] { cache.put(held); });
  while (!slow.deregistering.load()) std::this_thread::yield();
  const size_t released = cache.release_unused(1);
  slow.refusal_returned.store(true);
  closer.join();
  backend.during_deregister = nullptr;
  return released;
}

TEST_F(RegistrationCacheTest, ARefusalWaitsForAnotherThreadsSlowDeregistrationToEnd) {
  RegistrationCache& cache = make(limits(16));
  Peer::set_rounds_without_progress(cache, 64);
  CacheHandle held = get(page(0), kPage);
  const uint64_t id = FakeBackend::id_of(held);
  monitor_.notify(page(0), page(1));  // out of the index: nothing idle is left
  SlowDeregistration slow{16 * 64};
  const size_t released = refusal_beside_slow_close(cache, backend_, held, slow);
  EXPECT_EQ(released, 1u) << "the refusal gave up on a deregistration under way";
  EXPECT_TRUE(slow.waited_out.load()) << "the refusal returned before it waited past its bound";
  EXPECT_FALSE(slow.stuck.load());
  EXPECT_FALSE(backend_.is_live(id));
  EXPECT_EQ(Peer::in_transit(cache), 0u);
}

TEST_F(RegistrationCacheTest, ARefusalWaitsForACallbackNicsDeregistrationOnlyAWhile) {
  backend_.dereg_may_wait_for_application = true;
  RegistrationCache& cache = make(limits(16));
  Peer::set_rounds_without_progress(cache, 64);
  CacheHandle held = get(page(0), kPage);
  monitor_.notify(page(0), page(1));
  SlowDeregistration slow{0};
  const size_t released = refusal_beside_slow_close(cache, backend_, held, slow);
  EXPECT_EQ(released, 0u);
  EXPECT_FALSE(slow.stuck.load()) << "the refusal waited for the application's dereg";
  EXPECT_EQ(Peer::in_transit(cache), 0u);
}

// Under threads: hits, closes on other threads, invalidations and evictions beside pressure
// releases.  Once every thread has stopped and let go, nothing is in transit: every count a
// claim or a retirement added was taken off again (an account that drifted upwards would make
// every later refusal wait in vain; one that wrapped below 0 likewise).
TEST_F(RegistrationCacheTest, TheInTransitAccountReturnsToZeroAfterChurn) {
  RegistrationCache& cache = make(limits(24));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Draws draws(t + 1);
      CacheHandle kept[4];
      for (int i = 0; i < 4000; ++i) {
        const uint64_t draw = draws.next() >> 33;
        CacheHandle& slot = kept[draw % 4];
        if (slot) cache.put(slot);
        slot = get_checked(draw % 48, wrong);
        if (draw % 7 == 0) monitor_.notify(page(draw % 48), page(draw % 48 + 2));
        if (draw % 29 == 0) (void)cache.release_unused(2);
      }
      for (CacheHandle& handle : kept) {
        if (handle) cache.put(handle);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  cache.flush();
  EXPECT_EQ(Peer::in_transit(cache), 0u);
  EXPECT_EQ(backend_.live.size(), 0u) << "nothing held, nothing filed after the flush";
}

}  // namespace
}  // namespace hmr::core
