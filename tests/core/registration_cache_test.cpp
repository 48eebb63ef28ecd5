// core::RegistrationCache driven by a fake backend (counting NIC registrations) and a fake
// monitor (counting subscriptions; invalidations sent by the test through notify()):
// tests/core/registration_cache_fixture.h.  The contract is docs/semantics.md, "Registration
// cache".
#include "tests/core/registration_cache_fixture.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace hmr::core {
namespace {

using namespace cache_test;

// ------------------------------------------------------------------ hits and misses

TEST_F(RegistrationCacheTest, AttachStartsTheMonitorAndDetachLeavesIt) {
  RegistrationCache& cache = make(limits(16));
  EXPECT_EQ(monitor_.starts.load(), 1);
  EXPECT_TRUE(cache.attach().ok());  // idempotent
  EXPECT_EQ(monitor_.starts.load(), 1);
  const uint64_t id = touch(page(0), kPage);
  cache.detach();
  // A detached cache hears nothing more.
  monitor_.notify(page(0), page(1));
  EXPECT_EQ(cache.statistics().invalidations, 0u);
  EXPECT_TRUE(backend_.is_live(id));
}

TEST_F(RegistrationCacheTest, MissThenHitReturnsTheSameEntry) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle first = get(page(0), 4 * kPage);
  ASSERT_TRUE(first);
  EXPECT_EQ(backend_.registrations.load(), 1u);
  EXPECT_EQ(monitor_.subscribes.load(), 1);
  CacheHandle again = get(page(0), 4 * kPage);
  EXPECT_EQ(again.entry, first.entry);
  CacheHandle sub = get(page(1) + 100, kPage);  // contained sub-range
  EXPECT_EQ(sub.entry, first.entry);
  EXPECT_EQ(backend_.registrations.load(), 1u);
  EXPECT_EQ(monitor_.subscribes.load(), 1) << "a hit must not subscribe again";

  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.cached_regions, 1u);
  EXPECT_EQ(stats.cached_bytes, 4 * kPage);
  EXPECT_EQ(stats.in_use_regions, 1u);
  cache.put(first);
  cache.put(again);
  cache.put(sub);
  stats = cache.statistics();
  EXPECT_EQ(stats.in_use_regions, 0u);
  EXPECT_EQ(stats.cached_regions, 1u) << "an unused entry stays cached";
  EXPECT_EQ(backend_.deregistrations.load(), 0u);
}

TEST_F(RegistrationCacheTest, LargerOrShiftedRangeMisses) {
  RegistrationCache& cache = make(limits(16));
  touch(page(0), 2 * kPage);
  touch(page(0), 3 * kPage);      // larger: not contained
  touch(page(1) + 1, 2 * kPage);  // runs past both
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(backend_.registrations.load(), 3u);
}

TEST_F(RegistrationCacheTest, DifferentKeyMisses) {
  RegistrationCache& cache = make(limits(16));
  touch(page(0), kPage, access_key(1));
  touch(page(0), kPage, access_key(2));
  CacheKey device_key = access_key(1);
  device_key.device = 1;
  touch(page(0), kPage, device_key);
  CacheKey alloc_key = access_key(1);
  alloc_key.alloc_id = 99;
  touch(page(0), kPage, alloc_key);
  EXPECT_EQ(cache.statistics().hits, 0u);
  EXPECT_EQ(backend_.registrations.load(), 4u);
  touch(page(0), kPage, access_key(2));
  EXPECT_EQ(cache.statistics().hits, 1u);
}

TEST_F(RegistrationCacheTest, ExactStartKeyNeedsTheSameStart) {
  RegistrationCache& cache = make(limits(16));
  CacheKey exact = access_key();
  exact.exact_start = true;
  touch(page(0), 4 * kPage, exact);
  touch(page(1), kPage, exact);
  EXPECT_EQ(cache.statistics().hits, 0u);
  touch(page(0), kPage, exact);
  EXPECT_EQ(cache.statistics().hits, 1u);
}

TEST_F(RegistrationCacheTest, ReferenceCountKeepsInUseEntriesAcrossFlush) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle a = get(page(0), kPage);
  CacheHandle b = get(page(0), kPage);
  ASSERT_EQ(a.entry, b.entry);
  cache.put(a);
  cache.flush();
  EXPECT_EQ(backend_.deregistrations.load(), 0u) << "flush released an entry still held";
  EXPECT_EQ(cache.statistics().cached_regions, 1u);
  cache.put(b);
  EXPECT_EQ(backend_.deregistrations.load(), 0u) << "the last put of a valid entry keeps it";
  cache.flush();
  EXPECT_EQ(backend_.deregistrations.load(), 1u);
  EXPECT_EQ(cache.statistics().cached_regions, 0u);
  EXPECT_EQ(monitor_.unsubscribes.load(), 1);
}

TEST_F(RegistrationCacheTest, BackendFailureIsReturnedAndNothingIsCached) {
  RegistrationCache& cache = make(limits(16));
  backend_.fail_next = true;
  Result<CacheHandle> failed = cache.get(page(0), kPage, access_key());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_EFAULT);
  EXPECT_EQ(monitor_.subscribes.load(), monitor_.unsubscribes.load());
  EXPECT_EQ(cache.statistics().cached_regions, 0u);
  touch(page(0), kPage);
  EXPECT_EQ(cache.statistics().hits, 0u);
}

// ------------------------------------------------------------------ invalidation

TEST_F(RegistrationCacheTest, InvalidationDropsUnusedEntryAtOnce) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), 2 * kPage);
  const uint64_t untouched = touch(page(10), kPage);
  monitor_.notify(page(1), page(1) + 1);  // one byte of the first entry
  EXPECT_FALSE(backend_.is_live(id));
  EXPECT_TRUE(backend_.is_live(untouched));
  EXPECT_EQ(monitor_.unsubscribes.load(), 1);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.cached_regions, 1u);
  EXPECT_EQ(stats.cached_bytes, kPage);

  const uint64_t again = touch(page(0), 2 * kPage);
  EXPECT_NE(again, id);
  stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 3u);
}

TEST_F(RegistrationCacheTest, InvalidationOfAnAdjacentRangeKeepsTheEntry) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(1), kPage);
  monitor_.notify(page(0), page(1));  // ends where the entry starts
  monitor_.notify(page(2), page(3));  // starts where it ends
  EXPECT_TRUE(backend_.is_live(id));
  EXPECT_EQ(cache.statistics().invalidations, 0u);
  touch(page(1), kPage);
  EXPECT_EQ(cache.statistics().hits, 1u);
}

TEST_F(RegistrationCacheTest, InvalidatedEntryInUseIsDeregisteredByTheLastPut) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle held = get(page(0), kPage);
  CacheHandle held_too = get(page(0), kPage);
  ASSERT_EQ(held.entry, held_too.entry);
  const uint64_t id = FakeBackend::id_of(held);
  monitor_.notify(page(0), page(1));
  EXPECT_TRUE(backend_.is_live(id)) << "deregistered under its holders";
  EXPECT_EQ(held.registration().key.low_u64(), id) << "holder's registration changed";
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.cached_regions, 0u);
  EXPECT_EQ(stats.in_use_regions, 0u);

  // The next registration of the range is a new one, even while the old one is held.
  CacheHandle fresh = get(page(0), kPage);
  ASSERT_TRUE(fresh);
  EXPECT_NE(FakeBackend::id_of(fresh), id);
  EXPECT_EQ(cache.statistics().hits, 1u) << "only held_too was a hit";
  EXPECT_EQ(cache.statistics().misses, 2u);

  cache.put(held);
  EXPECT_TRUE(backend_.is_live(id));
  cache.put(held_too);
  EXPECT_FALSE(backend_.is_live(id)) << "the last holder's put must deregister";
  EXPECT_TRUE(backend_.is_live(FakeBackend::id_of(fresh)));
  cache.put(fresh);
}

TEST_F(RegistrationCacheTest, InvalidationOverAHugeRangeDropsEverythingInIt) {
  RegistrationCache& cache = make(limits(1024));
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 100; ++i) ids.push_back(touch(page(i * 3), kPage));
  const uint64_t outside = touch(kBase - (1ULL << 30), kPage);
  monitor_.notify(kBase, kBase + (1ULL << 40));
  for (uint64_t id : ids) EXPECT_FALSE(backend_.is_live(id));
  EXPECT_TRUE(backend_.is_live(outside));
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 100u);
  EXPECT_EQ(stats.cached_regions, 1u);
}

TEST_F(RegistrationCacheTest, ValidFalseOnHitForcesAMiss) {
  monitor_.check_on_hit = true;
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  EXPECT_EQ(monitor_.valid_calls.load(), 0) << "valid() is asked on hits, not misses";
  touch(page(0), kPage);
  EXPECT_EQ(monitor_.valid_calls.load(), 1);
  EXPECT_EQ(cache.statistics().hits, 1u);
  EXPECT_TRUE(backend_.is_live(id));

  monitor_.answer_valid = false;
  const uint64_t replaced = touch(page(0), kPage);
  EXPECT_NE(replaced, id);
  EXPECT_FALSE(backend_.is_live(id));
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(backend_.registrations.load(), 2u);
}

// A hit the monitor rejects is counted as a miss only.
TEST_F(RegistrationCacheTest, RejectedHitIsCountedOnlyAsAMiss) {
  monitor_.check_on_hit = true;
  RegistrationCache& cache = make(limits(16));
  touch(page(0), kPage);
  monitor_.answer_valid = false;
  touch(page(0), kPage);
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 2u);
}

TEST_F(RegistrationCacheTest, InvalidationDuringRegistrationIsNotCached) {
  RegistrationCache& cache = make(limits(16));
  // The memory changes while the NIC registers it: the monitor reports it after the cache
  // subscribed but before it inserted.
  backend_.during_register = [&](uintptr_t start, uint64_t len) {
    monitor_.notify(start, start + len);
  };
  CacheHandle raced = get(page(0), kPage);
  ASSERT_TRUE(raced);
  backend_.during_register = nullptr;
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 0u) << "an entry invalidated while registering was cached";
  EXPECT_EQ(stats.uncached, 1u);
  const uint64_t raced_id = FakeBackend::id_of(raced);
  cache.put(raced);
  EXPECT_FALSE(backend_.is_live(raced_id)) << "the only holder's put must deregister it";

  CacheHandle next = get(page(0), kPage);
  EXPECT_NE(FakeBackend::id_of(next), raced_id);
  stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.cached_regions, 1u);
  cache.put(next);
}

// The caller learned what the memory is before it called get() (a device registration: the
// runtime's answer, then its free watch set); an invalidation of the range in between — the
// memory freed the moment the watch was set — keeps the registration out of the index as one
// during get() does (found by a review: ROCr pool memory freed there was served to the next
// allocation at its address).
TEST_F(RegistrationCacheTest, InvalidationSinceTheCallersSequenceIsNotCached) {
  RegistrationCache& cache = make(limits(16));
  // get() of page 0 since `since`, and how many regions the cache holds after it.
  auto regions_after_get = [&](uint64_t since) -> uint64_t {
    Result<CacheHandle> handle =
        cache.get(page(0), kPage, access_key(), RegistrationCache::Probe::not_done, since);
    EXPECT_TRUE(handle.ok());
    const uint64_t regions = cache.statistics().cached_regions;
    if (handle.ok()) cache.put(*handle);
    return regions;
  };
  const uint64_t since = cache.invalidation_sequence();
  monitor_.notify(page(5), page(6));  // another range: no reason not to file
  monitor_.notify(page(0), page(1));
  EXPECT_EQ(regions_after_get(since), 0u) << "an entry invalidated before get() was cached";

  const uint64_t later = cache.invalidation_sequence();
  monitor_.notify(page(5), page(6));
  EXPECT_EQ(regions_after_get(later), 1u) << "another range's invalidation kept it out";
}

// A cache whose NIC the application serializes (a wrapped FI_THREAD_DOMAIN libfabric domain)
// leaves what a monitor's event killed for its own next call: hmr's reaper thread does not
// deregister it, and the next miss does.
TEST_F(RegistrationCacheTest, ACacheOfASerializedNicDeregistersOnlyInItsOwnCalls) {
  RegistrationCache& cache = make(limits(16));
  cache.deregister_in_application_calls_only();
  const uint64_t id = touch(page(0), kPage);
  {
    const Monitor::EventScope event_thread;  // as the userfaultfd thread reports an unmap
    monitor_.notify(page(0), page(1));
  }
  EXPECT_FALSE(cache.has_deferred()) << "a notification's second half would deregister it";
  cache.reap_deferred();  // what the reaper thread does when woken
  EXPECT_TRUE(backend_.is_live(id)) << "deregistered by the reaper's thread";
  touch(page(4), kPage);  // a miss: the application's own call
  EXPECT_FALSE(backend_.is_live(id));
}

// hmr's reaper thread deregisters what an unmap left dead also while poll(2) refuses it (the
// application lowered RLIMIT_NOFILE to 0): it used to end there, and freed memory stayed
// pinned until the application's next call into the cache.  Each round's registration is
// waited for (at most 10 s: the reaper takes about a millisecond then).
TEST_F(RegistrationCacheTest, TheReaperGoesOnWhilePollIsRefused) {
  make(limits(16));
  // The reaper's thread may start with this cache: it must be running before the fd limit
  // drops.  (UBSan's check of the new thread's first call probes memory through a pipe, which
  // fails with no fd left: a false "invalid vptr" in the sanitizer build, now and then.)
  const uint64_t first = touch(page(8), kPage);
  {
    const Monitor::EventScope event_thread;
    monitor_.notify(page(8), page(9));
  }
  while (backend_.is_live(first)) std::this_thread::yield();
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = 0;  // poll(2) of one fd: EINVAL
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  // The reaper waits in a poll it began before; the first round brings it round to the next,
  // which is refused.
  int left_pinned = 0;
  for (int round = 0; round < 3; ++round) {
    const uint64_t id = touch(page(2 * round), kPage);
    {
      const Monitor::EventScope event_thread;  // as the userfaultfd thread reports an unmap
      monitor_.notify(page(2 * round), page(2 * round + 1));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (backend_.is_live(id) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (backend_.is_live(id)) ++left_pinned;
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(left_pinned, 0) << "rounds whose dead registration the reaper never deregistered";
}

TEST_F(RegistrationCacheTest, InvalidationOfAnotherRangeDuringRegistrationStillCaches) {
  RegistrationCache& cache = make(limits(16));
  backend_.during_register = [&](uintptr_t start, uint64_t len) {
    monitor_.notify(start + len, start + 2 * len);
  };
  touch(page(0), kPage);
  backend_.during_register = nullptr;
  EXPECT_EQ(cache.statistics().cached_regions, 1u);
  touch(page(0), kPage);
  EXPECT_EQ(cache.statistics().hits, 1u);
}

TEST_F(RegistrationCacheTest, ManyInvalidationsDuringRegistrationAreNotMissed) {
  RegistrationCache& cache = make(limits(16));
  // More invalidations than the cache remembers individually, the overlapping one first.
  backend_.during_register = [&](uintptr_t start, uint64_t len) {
    monitor_.notify(start, start + len);
    for (uint64_t i = 0; i < 200; ++i) monitor_.notify(page(1000 + i), page(1001 + i));
  };
  CacheHandle raced = get(page(0), kPage);
  backend_.during_register = nullptr;
  EXPECT_EQ(cache.statistics().cached_regions, 0u);
  cache.put(raced);
}

TEST_F(RegistrationCacheTest, RefusedSubscriptionHandsOutUncached) {
  RegistrationCache& cache = make(limits(16));
  monitor_.refuse_subscribe = true;
  CacheHandle entry = get(page(0), kPage);
  ASSERT_TRUE(entry);
  const uint64_t id = FakeBackend::id_of(entry);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 0u) << "an unwatched range must never be cached";
  EXPECT_EQ(stats.uncached, 1u);
  cache.put(entry);
  EXPECT_FALSE(backend_.is_live(id));
  monitor_.refuse_subscribe = false;
}

// ------------------------------------------------------------------ limits and eviction

// The CLOCK hand sweeps the index's slot table, so among entries of equal standing the order
// is the table's (hash order), not age: the tests below assert only what CLOCK guarantees.
TEST_F(RegistrationCacheTest, ClockGivesARecentlyHitEntryASecondChance) {
  RegistrationCache& cache = make(limits(3));
  const uint64_t a = touch(page(0), kPage);
  const uint64_t b = touch(page(2), kPage);
  const uint64_t c = touch(page(4), kPage);
  touch(page(0), kPage);  // hit: A is recently used; B and C were only filed
  EXPECT_EQ(cache.statistics().hits, 1u);

  const uint64_t d = touch(page(6), kPage);
  EXPECT_TRUE(backend_.is_live(a)) << "the recently hit entry was evicted first";
  EXPECT_NE(backend_.is_live(b), backend_.is_live(c)) << "one of the entries never hit goes";
  EXPECT_TRUE(backend_.is_live(d));
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.cached_regions, 3u);
  EXPECT_EQ(stats.invalidations, 0u);

  // The other one goes next: the last sweep already used up its chance, not A's (a hit is
  // worth two passes of the hand) nor new D's.
  const uint64_t e = touch(page(8), kPage);
  EXPECT_FALSE(backend_.is_live(b));
  EXPECT_FALSE(backend_.is_live(c));
  EXPECT_TRUE(backend_.is_live(a));
  EXPECT_TRUE(backend_.is_live(d));
  EXPECT_TRUE(backend_.is_live(e));

  // A second chance does not last: with no more hits, A goes within a few more sweeps.
  for (uint64_t i = 0; i < 6; ++i) touch(page(10 + 2 * i), kPage);
  EXPECT_FALSE(backend_.is_live(a)) << "a hit protected its entry forever";
  stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 8u);
  EXPECT_EQ(stats.cached_regions, 3u);
}

TEST_F(RegistrationCacheTest, HotEntriesSurviveAStreamOfColdOnes) {
  RegistrationCache& cache = make(limits(8));
  const uint64_t hot_a = touch(page(0), kPage);
  const uint64_t hot_b = touch(page(2), 3 * kPage);  // several slots
  for (uint64_t i = 0; i < 200; ++i) {
    touch(page(100 + 2 * i), kPage);  // never used again
    ASSERT_EQ(touch(page(0), kPage), hot_a) << "hot entry evicted after cold " << i;
    ASSERT_EQ(touch(page(3), kPage), hot_b) << "hot entry evicted after cold " << i;
  }
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 400u);
  EXPECT_EQ(stats.evictions, 200u - 6u);
  EXPECT_EQ(stats.cached_regions, 8u);
}

TEST_F(RegistrationCacheTest, EvictionSkipsEntriesInUse) {
  RegistrationCache& cache = make(limits(2));
  CacheHandle held = get(page(0), kPage);
  const uint64_t unused = touch(page(2), kPage);
  const uint64_t newest = touch(page(4), kPage);
  EXPECT_TRUE(backend_.is_live(FakeBackend::id_of(held)));
  EXPECT_FALSE(backend_.is_live(unused));
  EXPECT_TRUE(backend_.is_live(newest));
  EXPECT_EQ(cache.statistics().evictions, 1u);
  cache.put(held);
}

TEST_F(RegistrationCacheTest, AllInUseHandsOutUncached) {
  RegistrationCache& cache = make(limits(2));
  CacheHandle a = get(page(0), kPage);
  CacheHandle b = get(page(2), kPage);
  CacheHandle c = get(page(4), kPage);
  ASSERT_TRUE(a && b && c);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.uncached, 1u);
  EXPECT_EQ(stats.cached_regions, 2u);
  EXPECT_EQ(stats.in_use_regions, 2u);
  EXPECT_EQ(stats.evictions, 0u);
  // The uncached one is still a working registration, private to its holder.
  CacheHandle c_again = get(page(4), kPage);
  EXPECT_NE(c_again.entry, c.entry);
  const uint64_t c_id = FakeBackend::id_of(c);
  cache.put(c);
  EXPECT_FALSE(backend_.is_live(c_id)) << "an uncached entry is deregistered by its put";
  cache.put(c_again);
  cache.put(a);
  cache.put(b);
  EXPECT_EQ(cache.statistics().cached_regions, 2u);
}

TEST_F(RegistrationCacheTest, ByteLimitEvictsToMakeRoom) {
  RegistrationCache& cache = make(limits(100, 4 * kPage));
  const uint64_t a = touch(page(0), kPage);
  const uint64_t b = touch(page(2), kPage);
  const uint64_t c = touch(page(4), 2 * kPage);
  EXPECT_EQ(cache.statistics().cached_bytes, 4 * kPage);
  touch(page(4), 2 * kPage);  // hit: C is recently used
  const uint64_t d = touch(page(8), 2 * kPage);  // needs two pages: A and B go
  EXPECT_FALSE(backend_.is_live(a));
  EXPECT_FALSE(backend_.is_live(b));
  EXPECT_TRUE(backend_.is_live(c));
  EXPECT_TRUE(backend_.is_live(d));
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 2u);
  EXPECT_EQ(stats.cached_bytes, 4 * kPage);
  EXPECT_EQ(stats.cached_regions, 2u);
}

// A region that alone exceeds max_bytes is handed out uncached without evicting anything:
// emptying the cache could not make it fit.
TEST_F(RegistrationCacheTest, RegionLargerThanTheByteLimitIsUncachedAndEvictsNothing) {
  RegistrationCache& cache = make(limits(100, 4 * kPage));
  const uint64_t a = touch(page(0), kPage);
  CacheHandle big = get(page(16), 5 * kPage);
  ASSERT_TRUE(big);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.uncached, 1u);
  EXPECT_LE(stats.cached_bytes, 4 * kPage);
  // Evicting for a region that cannot be cached anyway only throws work away.
  EXPECT_TRUE(backend_.is_live(a)) << "entries were evicted for a region too big to cache";
  EXPECT_EQ(stats.evictions, 0u);
  cache.put(big);
}

TEST_F(RegistrationCacheTest, CountLimitHoldsUnderChurn) {
  RegistrationCache& cache = make(limits(8));
  for (uint64_t i = 0; i < 100; ++i) {
    touch(page(i % 23 * 2), kPage);
    ASSERT_LE(cache.statistics().cached_regions, 8u);
  }
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits + stats.misses, 100u);
  EXPECT_EQ(stats.misses - stats.evictions, stats.cached_regions);
  EXPECT_EQ(backend_.registrations.load() - backend_.deregistrations.load(), stats.cached_regions);
}

TEST_F(RegistrationCacheTest, ZeroCountDisablesCaching) {
  RegistrationCache& cache = make(limits(0));
  CacheHandle a = get(page(0), kPage);
  CacheHandle b = get(page(0), kPage);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a.entry, b.entry);
  EXPECT_EQ(monitor_.subscribes.load(), 0) << "nothing to watch without caching";
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.cached_regions, 0u);
  const uint64_t a_id = FakeBackend::id_of(a);
  cache.put(a);
  EXPECT_FALSE(backend_.is_live(a_id));
  cache.put(b);
  EXPECT_EQ(backend_.registrations.load(), 2u);
  EXPECT_EQ(backend_.deregistrations.load(), 2u);
}

TEST_F(RegistrationCacheTest, WithoutAMonitorCachesBlindly) {
  RegistrationCache& cache = make(limits(4), /*with_monitor=*/false);
  touch(page(0), kPage);
  touch(page(0), kPage);
  EXPECT_EQ(cache.statistics().hits, 1u);
  EXPECT_EQ(monitor_.subscribes.load(), 0);
}

// ------------------------------------------------------------------ flush and statistics

TEST_F(RegistrationCacheTest, FlushReleasesEveryUnusedEntry) {
  RegistrationCache& cache = make(limits(16));
  std::vector<uint64_t> unused;
  for (uint64_t i = 0; i < 5; ++i) unused.push_back(touch(page(i * 2), kPage));
  CacheHandle held = get(page(20), 3 * kPage);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 6u);
  EXPECT_EQ(stats.cached_bytes, 8 * kPage);
  EXPECT_EQ(stats.in_use_regions, 1u);

  cache.flush();
  for (uint64_t id : unused) EXPECT_FALSE(backend_.is_live(id));
  EXPECT_TRUE(backend_.is_live(FakeBackend::id_of(held)));
  stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 1u);
  EXPECT_EQ(stats.cached_bytes, 3 * kPage);
  EXPECT_EQ(stats.in_use_regions, 1u);
  EXPECT_EQ(stats.evictions, 0u) << "flush is not eviction";
  EXPECT_EQ(stats.invalidations, 0u) << "flush is not invalidation";
  EXPECT_EQ(monitor_.unsubscribes.load(), 5);

  // The held entry is still a hit after the flush.
  CacheHandle again = get(page(21), kPage);
  EXPECT_EQ(again.entry, held.entry);
  cache.put(again);
  cache.put(held);
}

TEST_F(RegistrationCacheTest, StatisticsAddUp) {
  RegistrationCache& cache = make(limits(2));
  touch(page(0), kPage);           // miss
  touch(page(0), kPage);           // hit
  CacheHandle held = get(page(2), 2 * kPage);  // miss
  touch(page(6), kPage);           // miss, evicts page(0)
  monitor_.notify(page(6), page(7));  // invalidates page(6)
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.uncached, 0u);
  EXPECT_EQ(stats.cached_regions, 1u);
  EXPECT_EQ(stats.cached_bytes, 2 * kPage);
  EXPECT_EQ(stats.in_use_regions, 1u);
  cache.put(held);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
}

// Statistics taken after munmap() returned include its invalidation.  userfaultfd releases
// the unmapping thread as soon as its event thread has read the event, before the caches are
// told; a lookup waits for that (wait_for_monitor), and statistics() must too, or they miss
// the invalidation now and then (CacheCoherence.ConcurrentRemapsNeverYieldStaleHits saw 0
// invalidations on a loaded machine).  Here the test is the event thread: it raises pending,
// and delivers and lowers it a while after the reader began to ask (a few hundred yields:
// the check does not depend on how long, a reader that does not wait reads first then).
TEST_F(RegistrationCacheTest, StatisticsWaitForAnUnmapTheMonitorHasReadButNotDelivered) {
  RegistrationCache& cache = make(limits(64));
  constexpr int kRounds = 50;
  std::atomic<int> asking{0};     // the round whose statistics the reader is taking
  std::atomic<int> delivered{0};  // the last round the event thread delivered
  // One event thread for every round (threads' slots are never handed back: util/thread_slot.h).
  std::thread event_thread([&] {
    for (int round = 1; round <= kRounds; ++round) {
      while (asking.load() != round) std::this_thread::yield();
      for (int i = 0; i < 300; ++i) std::this_thread::yield();
      monitor_.notify(page(2 * round), page(2 * round + 1));
      monitor_.lower_pending();
      delivered.store(round);
    }
  });
  int counted_late = 0;
  for (int round = 1; round <= kRounds; ++round) {
    touch(page(2 * round), kPage);
    const uint64_t before = cache.statistics().invalidations;
    monitor_.raise_pending();  // the event is read: munmap() has returned
    asking.store(round);
    if (cache.statistics().invalidations != before + 1) ++counted_late;
    while (delivered.load() != round) std::this_thread::yield();
  }
  event_thread.join();
  EXPECT_EQ(counted_late, 0) << "rounds whose statistics, taken after the unmap returned, "
                                "missed its invalidation";
}

// ------------------------------------------------------------------ threads

TEST_F(RegistrationCacheTest, ConcurrentHitsMissesAndInvalidationsStayConsistent) {
  RegistrationCache& cache = make(limits(24));
  constexpr int kThreads = 3;
  constexpr int kIterations = 3000;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Draws draws(t + 1);
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t state = draws.next();
        const uint64_t n = (state >> 33) % 32;
        Result<CacheHandle> handle = cache.get(page(n), kPage, access_key());
        if (!handle.ok()) {
          bad.fetch_add(1);
          continue;
        }
        if (!handle->entry->contains(page(n), kPage) ||
            !backend_.is_live(FakeBackend::id_of(*handle))) {
          bad.fetch_add(1);
        }
        cache.put(*handle);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kIterations; ++i) {
      const uint64_t n = static_cast<uint64_t>(i) * 7 % 32;
      monitor_.notify(page(n), page(n + 1));
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits + stats.misses, static_cast<uint64_t>(kThreads) * kIterations);
  EXPECT_LE(stats.cached_regions, 24u);
  EXPECT_EQ(stats.in_use_regions, 0u);
  EXPECT_EQ(backend_.registrations.load() - backend_.deregistrations.load(), stats.cached_regions);
}

// ------------------------------------------------------------------ references of multi-block entries

TEST_F(RegistrationCacheTest, HitsThroughDifferentSlotsOfOneEntryAreAllCounted) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle whole = get(page(10), 3 * kPage);  // filed under three 4 KiB blocks
  CacheHandle second = get(page(11) + 100, 10);
  CacheHandle third = get(page(12), kPage);
  CacheHandle third_again = get(page(12) + 5, 5);
  ASSERT_TRUE(whole && second && third && third_again);
  EXPECT_EQ(second.entry, whole.entry);
  EXPECT_EQ(third.entry, whole.entry);
  EXPECT_NE(RegistrationCacheTestPeer::slot_of(cache, second, page(11) + 100),
            RegistrationCacheTestPeer::slot_of(cache, third, page(12)))
      << "each hit is found through the slot of its own block";
  const uint64_t id = FakeBackend::id_of(whole);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 3u);
  EXPECT_EQ(stats.in_use_regions, 1u);

  // Putting back some, through their own slots, keeps it in use; all of them frees it.
  cache.put(third);
  cache.put(whole);
  EXPECT_EQ(cache.statistics().in_use_regions, 1u);
  cache.flush();
  EXPECT_TRUE(backend_.is_live(id)) << "flushed while held through its other slots";
  cache.put(second);
  cache.put(third_again);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
  cache.flush();
  EXPECT_FALSE(backend_.is_live(id));
}

TEST_F(RegistrationCacheTest, InvalidationSumsTheHoldsOfEverySlot) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle whole = get(page(20), 3 * kPage);
  std::vector<CacheHandle> hits;
  for (uint64_t i = 0; i < 3; ++i) hits.push_back(get(page(20 + i), kPage));
  hits.push_back(get(page(21), kPage));
  const uint64_t id = FakeBackend::id_of(whole);
  monitor_.notify(page(22), page(22) + 1);  // the last page only
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.cached_regions, 0u);
  // The range is registered anew; the five holders keep the old registration until the last
  // of them puts it back, in any order, through a slot that no longer exists.
  CacheHandle fresh = get(page(20), kPage);
  EXPECT_NE(FakeBackend::id_of(fresh), id);
  cache.put(hits[2]);
  cache.put(whole);
  cache.put(hits[0]);
  cache.put(hits[3]);
  EXPECT_TRUE(backend_.is_live(id)) << "deregistered while one holder is left";
  cache.put(hits[1]);
  EXPECT_FALSE(backend_.is_live(id)) << "the last holder's put must deregister it";
  EXPECT_EQ(backend_.deregistrations.load(), 1u);
  cache.put(fresh);
}

TEST_F(RegistrationCacheTest, EvictionNeverTakesAnEntryHeldThroughAnyOfItsSlots) {
  RegistrationCache& cache = make(limits(2));
  const uint64_t multi = touch(page(0), 3 * kPage);
  CacheHandle held = get(page(2), kPage);  // through the entry's last slot only
  ASSERT_EQ(FakeBackend::id_of(held), multi);
  for (uint64_t i = 0; i < 20; ++i) {
    touch(page(10 + 2 * i), kPage);
    ASSERT_TRUE(backend_.is_live(multi)) << "evicted while held, at insertion " << i;
  }
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 19u);
  EXPECT_EQ(stats.in_use_regions, 1u);
  EXPECT_EQ(stats.uncached, 0u);
  cache.put(held);
  for (uint64_t i = 0; i < 6; ++i) touch(page(100 + 2 * i), kPage);
  EXPECT_FALSE(backend_.is_live(multi)) << "evictable again once put back";
}

TEST_F(RegistrationCacheTest, HoldsSurviveIndexGrowthAndOtherEntriesLeaving) {
  RegistrationCache& cache = make(limits(4096));
  // Held while the index grows several times and while neighbours leave (their slots are
  // back-shifted over the held ones).
  std::vector<CacheHandle> held;
  for (uint64_t i = 0; i < 600; ++i) held.push_back(get(page(3 * i), (1 + i % 2) * kPage));
  for (uint64_t i = 0; i < 600; i += 3) monitor_.notify(page(3 * i), page(3 * i) + 1);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 400u);
  EXPECT_EQ(stats.in_use_regions, 400u);
  for (const CacheHandle& handle : held) cache.put(handle);
  EXPECT_EQ(backend_.deregistrations.load(), 200u) << "invalidated ones die with their put";
  stats = cache.statistics();
  EXPECT_EQ(stats.in_use_regions, 0u);
  cache.flush();
  EXPECT_EQ(backend_.deregistrations.load(), 600u);
}

// The limit binds references confirmed in the entry.  Hits served from the slot alone count in
// threads' own tables (each stops at kMaxDebt and falls back here), which cannot carry `state`
// over: so this entry is one a slot does not serve, a range that does not start on a page.
TEST_F(RegistrationCacheTest, ASaturatedEntryHandsTheRequestOutUncached) {
  RegistrationCache& cache = make(limits(16));
  constexpr uintptr_t kOff = 64;
  CacheHandle first = get(page(0) + kOff, kPage - kOff);
  const uint64_t id = FakeBackend::id_of(first);
  CacheEntry& entry = *first.entry;
  ASSERT_EQ(entry.references(), 1u);
  // As if 2^30 - 3 more MRs held it.
  const uint32_t others = CacheEntry::kMaxRefs - 2;
  entry.state.fetch_add(others);

  CacheHandle last_one = get(page(0) + kOff, kPage - kOff);  // reaches the limit
  EXPECT_EQ(FakeBackend::id_of(last_one), id);
  EXPECT_EQ(entry.references(), CacheEntry::kMaxRefs);
  // The hit path's find() must not call a saturated entry an absence: get() has to look, to
  // learn that the request goes out uncached rather than as a second entry.
  RegistrationCache::Probe probed = RegistrationCache::Probe::not_done;
  EXPECT_FALSE(cache.find(page(0) + kOff, kPage - kOff, access_key(), this_thread_slot(), probed));
  EXPECT_EQ(probed, RegistrationCache::Probe::not_done);
  CacheHandle beyond = get(page(0) + kOff, kPage - kOff);
  ASSERT_TRUE(beyond);
  EXPECT_NE(FakeBackend::id_of(beyond), id) << "a saturated entry must not be counted past";
  EXPECT_EQ(entry.references(), CacheEntry::kMaxRefs) << "the refused reference changed the count";
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.uncached, 1u);
  EXPECT_EQ(stats.cached_regions, 1u);
  const uint64_t beyond_id = FakeBackend::id_of(beyond);
  cache.put(beyond);
  EXPECT_FALSE(backend_.is_live(beyond_id)) << "an uncached registration dies with its put";

  cache.put(last_one);
  entry.state.fetch_sub(others);
  cache.put(first);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
  EXPECT_EQ(touch(page(0) + kOff, kPage - kOff), id) << "still cached and usable";
}

TEST_F(RegistrationCacheTest, AProbeThatFoundNothingSparesGetItsOwnLookup) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t cached = touch(page(0), 2 * kPage);
  RegistrationCache::Probe probed = RegistrationCache::Probe::not_done;
  EXPECT_FALSE(cache.find(page(4), kPage, access_key(), this_thread_slot(), probed));
  EXPECT_EQ(probed, RegistrationCache::Probe::absent) << "nothing covers page 4";
  probed = RegistrationCache::Probe::not_done;
  EXPECT_FALSE(cache.find(page(1), kPage, access_key(2), this_thread_slot(), probed));
  EXPECT_EQ(probed, RegistrationCache::Probe::absent) << "page 1 is cached, but for other access";
  probed = RegistrationCache::Probe::not_done;
  CacheHandle found = cache.find(page(1), kPage, access_key(), this_thread_slot(), probed);
  ASSERT_TRUE(found);
  EXPECT_EQ(probed, RegistrationCache::Probe::not_done) << "a hit is no absence";
  cache.put(found);

  // get() trusts the caller's probe: it registers at once, without a lookup of its own (which
  // would have found the cached range).  Both registrations stay valid and cached.
  Result<CacheHandle> fresh = cache.get(page(1), kPage, access_key(),
                                        RegistrationCache::Probe::absent);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(FakeBackend::id_of(*fresh), cached);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.cached_regions, 2u);
  cache.put(*fresh);
  // Without the probe it looks, and hits.
  EXPECT_EQ(touch(page(0), 2 * kPage), cached);
}

TEST_F(RegistrationCacheTest, DeviceKeysHitThroughTheirConfirmedTag) {
  RegistrationCache& cache = make(limits(16));
  CacheKey device_one = access_key(1);
  device_one.iface = 1;
  device_one.device = 1;
  device_one.alloc_id = 7;
  CacheKey device_two = device_one;
  device_two.device = 2;
  const uint64_t one = touch(page(0), 2 * kPage, device_one);
  EXPECT_EQ(touch(page(1), kPage, device_one), one);
  EXPECT_NE(touch(page(0), kPage, device_two), one);
  EXPECT_NE(touch(page(0), kPage, access_key(1)), one) << "a host key must not hit it";
  const CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 3u);
}

TEST_F(RegistrationCacheTest, RangesTooLargeToFileAreHandedOutUncached) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t huge = 9ULL << 39;  // nine 512 GiB blocks at least
  CacheHandle handle = get(kBase, huge);
  ASSERT_TRUE(handle);
  const uint64_t id = FakeBackend::id_of(handle);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.uncached, 1u);
  EXPECT_EQ(stats.cached_regions, 0u);
  EXPECT_EQ(monitor_.subscribes.load(), 0) << "nothing to watch for an uncached range";
  cache.put(handle);
  EXPECT_FALSE(backend_.is_live(id));
}

// Readers hit and put back the same ranges that another thread keeps invalidating: no hit
// may return a registration the invalidation already killed, every registration is
// deregistered exactly once (FakeBackend checks), and none is lost (TearDown checks).
TEST_F(RegistrationCacheTest, ConcurrentHitsNeverSeeAnInvalidatedRegistration) {
  RegistrationCache& cache = make(limits(64));
  constexpr uint64_t kPages = 16;
  constexpr int kReaders = 3;
  constexpr int kIterations = 5000;
  // No registration with an id up to floor[p] may be returned for page p by a get() that
  // starts after floor[p] was published (they were all made before p's last invalidation).
  std::atomic<uint64_t> floor[kPages] = {};
  std::atomic<int> stale{0}, wrong{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> notified{0};
  // Reader iterations so far: the invalidating thread paces itself on them, so entries get
  // cached between invalidations however the scheduler runs the threads (an unpaced stream
  // of invalidations can keep every miss from being inserted, and then nothing is invalidated).
  std::atomic<uint64_t> progress{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&, t] {
      // Until both this reader's iterations and 2000 invalidations while it runs are done:
      // the threads overlap however the scheduler places them.
      while (notified.load() == 0) std::this_thread::yield();
      const uint64_t notified_at_start = notified.load();
      Draws draws(t + 1);
      std::vector<CacheHandle> held;
      for (int i = 0; i < kIterations || notified.load() < notified_at_start + 2000; ++i) {
        progress.fetch_add(1, std::memory_order_relaxed);
        const uint64_t state = draws.next();
        const uint64_t first = (state >> 33) % kPages;
        const uint64_t pages = first + 1 < kPages && (state >> 20) % 3 == 0 ? 2 : 1;
        uint64_t newest_floor = 0;
        for (uint64_t p = first; p < first + pages; ++p) {
          newest_floor = std::max(newest_floor, floor[p].load(std::memory_order_acquire));
        }
        Result<CacheHandle> handle = cache.get(page(first), pages * kPage, access_key());
        if (!handle.ok()) {
          wrong.fetch_add(1);
          continue;
        }
        const uint64_t id = FakeBackend::id_of(*handle);
        if (id <= newest_floor) stale.fetch_add(1);
        if (!handle->entry->contains(page(first), pages * kPage) || !backend_.is_live(id)) {
          wrong.fetch_add(1);
        }
        // Keep a few for a while, so invalidations meet held entries too.
        held.push_back(*handle);
        if (held.size() > 4 || (state >> 40) % 2 == 0) {
          const size_t victim = (state >> 44) % held.size();
          cache.put(held[victim]);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
        }
      }
      for (const CacheHandle& handle : held) cache.put(handle);
    });
  }
  threads.emplace_back([&] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      // After the first one (which releases the readers), one invalidation per 4 reader gets.
      const uint64_t paced = progress.load() + (i == 0 ? 0 : 4);
      while (progress.load() < paced && !stop.load()) std::this_thread::yield();
      const uint64_t p = i * 7 % kPages;
      const uint64_t before = backend_.registrations.load();
      monitor_.notify(page(p), page(p) + 1);
      floor[p].store(before, std::memory_order_release);
      notified.fetch_add(1);
    }
  });
  for (int t = 0; t < kReaders; ++t) threads[static_cast<size_t>(t)].join();
  stop.store(true);
  threads.back().join();
  EXPECT_EQ(stale.load(), 0) << "a get returned a registration invalidated before it began";
  EXPECT_EQ(wrong.load(), 0);
  const CacheStatistics stats = cache.statistics();
  EXPECT_GT(stats.invalidations, 0u);
  EXPECT_GT(stats.hits, 0u);
  EXPECT_EQ(stats.in_use_regions, 0u);
  EXPECT_EQ(backend_.registrations.load() - backend_.deregistrations.load(), stats.cached_regions);
}

// Hits take no lock, so they probe the index while another thread inserts: the table grows
// many times meanwhile, and the old one is freed only after every reader that may still probe
// it has left (under ASan a reader on a freed table fails here).  Inserting never moves a
// filed slot, so every hit of an entry filed before must still hit.
TEST_F(RegistrationCacheTest, HitsGoOnWhileAnotherThreadGrowsTheIndex) {
  RegistrationCache& cache = make(limits(100000));
  constexpr uint64_t kHot = 32;
  std::vector<CacheHandle> hot;
  for (uint64_t p = 0; p < kHot; ++p) hot.push_back(get(page(2 * p), kPage));
  for (const CacheHandle& handle : hot) cache.put(handle);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0}, wrong{0}, hits{0};
  std::thread reader([&] {
    for (uint64_t i = 0; !done.load(std::memory_order_relaxed) || i < 10000; ++i) {
      const uint64_t p = 2 * (i % kHot);
      const CacheHandle handle = cache.find(page(p), kPage, access_key());
      if (!handle) {
        misses.fetch_add(1);
        continue;
      }
      if (!handle.entry->contains(page(p), kPage) || !backend_.is_live(FakeBackend::id_of(handle))) {
        wrong.fetch_add(1);
      }
      hits.fetch_add(1);
      cache.put(handle);
    }
  });
  const uint64_t capacity_before = cache.statistics().cached_regions;
  for (uint64_t p = 0; p < 20000; ++p) cache.put(get(page(1000 + 2 * p), kPage));
  done.store(true);
  reader.join();
  EXPECT_EQ(capacity_before, kHot);
  EXPECT_EQ(misses.load(), 0u) << "an entry filed before the table grew was not found";
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GE(hits.load(), 10000u);
  EXPECT_EQ(cache.statistics().cached_regions, kHot + 20000);
}

// A small cache under churn: entries are evicted and their storage recycled for other ranges
// while readers still hold pointers read from the index.  A reader must never be handed an
// entry that is not live or does not cover its request, and every registration is
// deregistered exactly once (FakeBackend checks).
TEST_F(RegistrationCacheTest, RecycledEntriesAreNeverHandedOutForAnotherRange) {
  RegistrationCache& cache = make(limits(8));
  constexpr uint64_t kPages = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Draws draws(t + 7);
      for (int i = 0; i < 20000; ++i) {
        const uint64_t state = draws.next();
        const CacheHandle handle = get_checked((state >> 33) % kPages, wrong);
        if (handle) cache.put(handle);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const CacheStatistics stats = cache.statistics();
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_GT(stats.hits, 0u);
  EXPECT_EQ(stats.in_use_regions, 0u);
  EXPECT_LE(stats.cached_regions, 8u);
  EXPECT_EQ(backend_.registrations.load() - backend_.deregistrations.load(), stats.cached_regions);
}


// ------------------------------------------------------------------ owner references

// Runs `body` on a thread of its own (another thread slot) and waits for it.
void on_another_thread(const std::function<void()>& body) {
  std::thread thread(body);
  thread.join();
}

TEST_F(RegistrationCacheTest, EachThreadCountsItsHitsInItsOwnTable) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);  // filed by this thread: it owns the entry
  CacheHandle mine = get(page(0), kPage);
  ASSERT_EQ(FakeBackend::id_of(mine), id);
  EXPECT_EQ(mine.counted_by, this_thread_slot().owner_id());
  EXPECT_EQ(OwnerCounts::of(mine.entry->owner, mine.entry), 1u);
  EXPECT_EQ(mine.entry->state.load() & CacheEntry::kRefMask, CacheEntry::kZero)
      << "an owner's hit must leave the shared count alone";
  EXPECT_EQ(mine.entry->held_elsewhere.load(), 0) << "only its owner counted it so far";
  EXPECT_EQ(mine.entry->references(), 1u);

  // Another thread's hit is counted in that thread's table too, and marks the entry held
  // elsewhere, so retirers read every thread's table.
  CacheHandle theirs;
  on_another_thread([&] { theirs = get(page(0), kPage); });
  ASSERT_NE(theirs.counted_by, 0);
  EXPECT_NE(theirs.counted_by, mine.counted_by);
  EXPECT_EQ(OwnerCounts::of(theirs.counted_by, theirs.entry), 1u);
  EXPECT_EQ(mine.entry->state.load() & CacheEntry::kRefMask, CacheEntry::kZero)
      << "neither hit may touch the shared count";
  EXPECT_EQ(mine.entry->held_elsewhere.load(), 1);
  EXPECT_EQ(mine.entry->references(), 2u);
  EXPECT_EQ(cache.statistics().in_use_regions, 1u);

  cache.put(theirs);  // closed here, on another thread than the one that counted it
  cache.put(mine);
  EXPECT_EQ(OwnerCounts::of(mine.entry->owner, mine.entry), 0u);
  EXPECT_EQ(mine.entry->references(), 0u);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
  EXPECT_TRUE(backend_.is_live(id));
}

TEST_F(RegistrationCacheTest, InvalidatedWhileItsOwnerHoldsItDiesWithTheOwnersPut) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  CacheHandle first = get(page(0), kPage);
  CacheHandle second = get(page(0), kPage);
  ASSERT_TRUE(first.counted_by != 0 && second.counted_by != 0);
  monitor_.notify(page(0), page(1));
  EXPECT_TRUE(backend_.is_live(id)) << "the owner still holds two references";
  EXPECT_NE(touch(page(0), kPage), id) << "an invalidated entry is never hit";
  cache.put(first);
  EXPECT_TRUE(backend_.is_live(id)) << "one reference is left";
  cache.put(second);
  EXPECT_FALSE(backend_.is_live(id)) << "the owner's last put deregisters it";
}

// Retired by a thread other than the owner (a userfaultfd monitor's thread, another thread's
// eviction): the owner's count is read after a heavy fence (RegistrationCache::finish).
TEST_F(RegistrationCacheTest, RetiredOnAnotherThreadAnEntryDiesWhenItsOwnerLetsGo) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t unused = touch(page(0), kPage);
  on_another_thread([&] { monitor_.notify(page(0), page(1)); });
  EXPECT_FALSE(backend_.is_live(unused)) << "nobody held it: gone with the invalidation";

  const uint64_t id = touch(page(2), kPage);
  CacheHandle held = get(page(2), kPage);
  ASSERT_TRUE(held.counted_by != 0);
  on_another_thread([&] { monitor_.notify(page(2), page(3)); });
  EXPECT_TRUE(backend_.is_live(id)) << "its owner still holds it";
  EXPECT_NE(touch(page(2), kPage), id);
  cache.put(held);
  EXPECT_FALSE(backend_.is_live(id)) << "the owner's put was the last";

  // Flushed on another thread while held, then let go: the same.
  const uint64_t flushed = touch(page(4), kPage);
  CacheHandle first = get(page(4), kPage);
  on_another_thread([&] { cache.flush(); });
  EXPECT_TRUE(backend_.is_live(flushed)) << "flush drops unused entries only";
  cache.put(first);
  on_another_thread([&] { cache.flush(); });
  EXPECT_FALSE(backend_.is_live(flushed));
}

TEST_F(RegistrationCacheTest, AnOwnersReferenceClosedOnAnotherThreadStillCounts) {
  RegistrationCache& cache = make(limits(16));
  // Closed elsewhere while the entry is live: the count stays right, and a later
  // invalidation finds the entry unreferenced.
  const uint64_t id = touch(page(0), kPage);
  CacheHandle handed_over = get(page(0), kPage);
  ASSERT_TRUE(handed_over.counted_by != 0);
  on_another_thread([&] { cache.put(handed_over); });
  EXPECT_EQ(handed_over.entry->references(), 0u);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
  EXPECT_EQ(touch(page(0), kPage), id) << "still cached";
  monitor_.notify(page(0), page(1));
  EXPECT_FALSE(backend_.is_live(id)) << "unreferenced: the invalidation deregisters it";

  // Closed elsewhere after the invalidation: that put is the last and deregisters it.
  const uint64_t again = touch(page(4), kPage);
  CacheHandle held = get(page(4), kPage);
  ASSERT_TRUE(held.counted_by != 0);
  monitor_.notify(page(4), page(5));
  EXPECT_TRUE(backend_.is_live(again));
  on_another_thread([&] { cache.put(held); });
  EXPECT_FALSE(backend_.is_live(again));
}

// An owner registers, another thread closes (a transport's completion thread), a million
// times over: the owner's references given back in `state` are a debt the owner must repay,
// or the count would sink until it borrowed from kClaimed (about 2^29 closes) and the entry
// could never be freed.  The closing thread is simulated with the slot of a thread that has
// exited (nobody else uses it), so the loop runs at the speed of a hit.
TEST_F(RegistrationCacheTest, OwnersReferencesClosedElsewhereNeverSinkTheSharedCount) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  ThreadSlot elsewhere{};
  on_another_thread([&] { elsewhere = this_thread_slot(); });
  ASSERT_NE(elsewhere.owner_id(), this_thread_slot().owner_id());
  CacheEntry* entry = nullptr;
  for (uint32_t i = 0; i < CacheEntry::kMaxDebt + 1000; ++i) {
    const CacheHandle mine = cache.find(page(0), kPage, access_key());
    ASSERT_TRUE(mine.counted_by != 0) << "hit " << i;
    entry = mine.entry;
    cache.put(mine, elsewhere);
  }
  const uint32_t count = entry->state.load() & CacheEntry::kRefMask;
  EXPECT_GE(count, CacheEntry::kZero - CacheEntry::kMaxDebt) << "the debt was never repaid";
  EXPECT_LE(OwnerCounts::of(entry->owner, entry), CacheEntry::kMaxDebt);
  EXPECT_EQ(entry->references(), 0u);
  EXPECT_EQ(cache.statistics().in_use_regions, 0u);
  monitor_.notify(page(0), page(1));
  EXPECT_FALSE(backend_.is_live(id)) << "unreferenced: the invalidation deregisters it";
}

// Handles cross threads as a transport's requests do: each thread registers (missing or
// hitting, its own entries and the other's) and hands half of its handles to the other
// thread to close, while a third invalidates.  Owner references are then closed on both
// their own and foreign threads, beside invalidations.  Nothing may be handed out stale or
// dead, and every registration is deregistered exactly once (FakeBackend; TearDown).
TEST_F(RegistrationCacheTest, HandlesClosedOnOtherThreadsBesideInvalidationsAreCountedExactly) {
  RegistrationCache& cache = make(limits(64));
  constexpr uint64_t kPages = 16;
  std::atomic<int> wrong{0};
  std::atomic<bool> stop{false};
  std::mutex handoff_mutex;
  std::vector<CacheHandle> handoff[2];  // handles for worker t to close
  std::atomic<int> running{2};
  // The workers start once the notifier has: started after them, it could otherwise find them
  // all done on a loaded machine, and nothing would have been invalidated beside them.
  std::atomic<bool> notifying{false};
  std::atomic<uint64_t> notifications{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      while (!notifying.load()) std::this_thread::yield();
      Draws draws(t + 3);
      for (int i = 0; i < 100000; ++i) {
        const uint64_t state = draws.next();
        const CacheHandle handle = get_checked((state >> 33) % kPages, wrong);
        if (!handle) continue;
        std::vector<CacheHandle> mine;
        {
          std::lock_guard<std::mutex> lock(handoff_mutex);
          if ((state >> 40) % 2 == 0) {
            handoff[1 - t].push_back(handle);
          } else {
            mine.push_back(handle);
          }
          mine.insert(mine.end(), handoff[t].begin(), handoff[t].end());
          handoff[t].clear();
        }
        for (const CacheHandle& h : mine) cache.put(h);
      }
      running.fetch_sub(1);
    });
  }
  threads.emplace_back([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      monitor_.notify(page(i * 5 % kPages), page(i * 5 % kPages) + kPage);
      notifications.fetch_add(1);
      notifying.store(true);
      std::this_thread::yield();
    }
  });
  // It stops once every page was invalidated twice, however the threads were scheduled.
  while (running.load() != 0 || notifications.load() < 2 * kPages) std::this_thread::yield();
  stop.store(true);
  for (std::thread& thread : threads) thread.join();
  for (const std::vector<CacheHandle>& left : handoff) {
    for (const CacheHandle& h : left) cache.put(h);
  }
  EXPECT_EQ(wrong.load(), 0);
  const CacheStatistics stats = cache.statistics();
  EXPECT_GT(stats.hits, 0u);
  EXPECT_GT(stats.invalidations, 0u);
  EXPECT_EQ(stats.in_use_regions, 0u);
  EXPECT_EQ(backend_.registrations.load() - backend_.deregistrations.load(), stats.cached_regions);
}

}  // namespace
}  // namespace hmr::core
