// core::RegistrationCache driven by a fake backend (counting NIC registrations) and a fake
// monitor (counting subscriptions; invalidations sent by the test through notify()).
// The contract is docs/semantics.md, "Registration cache".
#include "core/cache/registration_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace hmr::core {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uintptr_t kBase = 0x7e0000000000;

uintptr_t page(uint64_t n) { return kBase + n * kPage; }

class FakeBackend final : public CacheBackend {
 public:
  Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                           const CacheKey& key) override {
    (void)key;
    if (during_register) during_register(start, len);
    if (fail_next) {
      fail_next = false;
      return make_error(HMR_EFAULT, "fake backend refuses [%#lx, +%llu)",
                        static_cast<unsigned long>(start), static_cast<unsigned long long>(len));
    }
    const uint64_t id = registrations.fetch_add(1) + 1;
    nic::Registration registration;
    registration.handle = reinterpret_cast<void*>(id);
    registration.desc = reinterpret_cast<void*>(id);
    registration.key = KeyBytes::from_u64(id, 8);
    registration.base_addr = start;
    std::lock_guard<std::mutex> lock(mutex);
    live.insert(id);
    return registration;
  }
  void deregister(nic::Registration& registration) override {
    const auto id = reinterpret_cast<uint64_t>(registration.handle);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(live.erase(id), 1u) << "registration " << id << " deregistered twice or never made";
    deregistered.push_back(id);
    deregistrations.fetch_add(1);
    registration = nic::Registration();
  }

  static uint64_t id_of(const CacheEntry* entry) {
    return reinterpret_cast<uint64_t>(entry->registration.handle);
  }
  bool is_live(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    return live.count(id) != 0;
  }

  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> deregistrations{0};
  std::mutex mutex;
  std::set<uint64_t> live;
  std::vector<uint64_t> deregistered;
  bool fail_next = false;
  std::function<void(uintptr_t, uint64_t)> during_register;
};

class FakeMonitor final : public Monitor {
 public:
  const char* name() const override { return "fake"; }
  Status start() override {
    starts.fetch_add(1);
    return ok_status();
  }
  void stop() override { stops.fetch_add(1); }
  Status subscribe(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    if (refuse_subscribe) return make_error(HMR_EFAULT, "fake monitor refuses");
    subscribes.fetch_add(1);
    return ok_status();
  }
  void unsubscribe(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    unsubscribes.fetch_add(1);
  }
  bool valid(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    valid_calls.fetch_add(1);
    return answer_valid.load();
  }
  bool checks_on_hit() const override { return check_on_hit; }

  std::atomic<int> starts{0}, stops{0}, subscribes{0}, unsubscribes{0}, valid_calls{0};
  std::atomic<bool> answer_valid{true};
  bool check_on_hit = false;
  bool refuse_subscribe = false;
};

CacheKey access_key(uint32_t access = 1) {
  CacheKey key;
  key.access = access;
  return key;
}

CacheLimits limits(size_t count, uint64_t bytes = 0) {
  CacheLimits l;
  l.max_count = count;
  l.max_bytes = bytes;
  return l;
}

class RegistrationCacheTest : public ::testing::Test {
 protected:
  // A fresh cache with these limits, attached to the fake monitor.
  RegistrationCache& make(CacheLimits l, bool with_monitor = true) {
    cache_ = std::make_unique<RegistrationCache>(backend_, l, with_monitor ? &monitor_ : nullptr);
    EXPECT_TRUE(cache_->attach().ok());
    return *cache_;
  }
  CacheEntry* get(uintptr_t start, uint64_t len, CacheKey key = access_key()) {
    Result<CacheEntry*> entry = cache_->get(start, len, key);
    EXPECT_TRUE(entry.ok()) << (entry.ok() ? "" : entry.status().reason());
    return entry.ok() ? *entry : nullptr;
  }
  // get() and put() at once: leaves an unused cached entry; returns its registration id.
  uint64_t touch(uintptr_t start, uint64_t len, CacheKey key = access_key()) {
    CacheEntry* entry = get(start, len, key);
    if (entry == nullptr) return 0;
    const uint64_t id = FakeBackend::id_of(entry);
    cache_->put(entry);
    return id;
  }
  void TearDown() override {
    cache_.reset();
    // Every NIC registration the cache made is gone once the cache is; every subscription
    // was withdrawn.
    EXPECT_EQ(backend_.registrations.load(), backend_.deregistrations.load());
    EXPECT_TRUE(backend_.live.empty());
    EXPECT_EQ(monitor_.subscribes.load(), monitor_.unsubscribes.load());
  }

  FakeBackend backend_;
  FakeMonitor monitor_;
  std::unique_ptr<RegistrationCache> cache_;
};

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
  CacheEntry* first = get(page(0), 4 * kPage);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(backend_.registrations.load(), 1u);
  EXPECT_EQ(monitor_.subscribes.load(), 1);
  CacheEntry* again = get(page(0), 4 * kPage);
  EXPECT_EQ(again, first);
  CacheEntry* sub = get(page(1) + 100, kPage);  // contained sub-range
  EXPECT_EQ(sub, first);
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
  CacheEntry* a = get(page(0), kPage);
  CacheEntry* b = get(page(0), kPage);
  ASSERT_EQ(a, b);
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
  Result<CacheEntry*> failed = cache.get(page(0), kPage, access_key());
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
  CacheEntry* held = get(page(0), kPage);
  CacheEntry* held_too = get(page(0), kPage);
  ASSERT_EQ(held, held_too);
  const uint64_t id = FakeBackend::id_of(held);
  monitor_.notify(page(0), page(1));
  EXPECT_TRUE(backend_.is_live(id)) << "deregistered under its holders";
  EXPECT_EQ(held->registration.key.low_u64(), id) << "holder's registration changed";
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.cached_regions, 0u);
  EXPECT_EQ(stats.in_use_regions, 0u);

  // The next registration of the range is a new one, even while the old one is held.
  CacheEntry* fresh = get(page(0), kPage);
  ASSERT_NE(fresh, nullptr);
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

// Disabled: fails today.  lookup() counts the hit before get() asks valid(); a hit the
// monitor rejects is then counted as a hit and as a miss.
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
  CacheEntry* raced = get(page(0), kPage);
  ASSERT_NE(raced, nullptr);
  backend_.during_register = nullptr;
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 0u) << "an entry invalidated while registering was cached";
  EXPECT_EQ(stats.uncached, 1u);
  const uint64_t raced_id = FakeBackend::id_of(raced);
  cache.put(raced);
  EXPECT_FALSE(backend_.is_live(raced_id)) << "the only holder's put must deregister it";

  CacheEntry* next = get(page(0), kPage);
  EXPECT_NE(FakeBackend::id_of(next), raced_id);
  stats = cache.statistics();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.cached_regions, 1u);
  cache.put(next);
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
  CacheEntry* raced = get(page(0), kPage);
  backend_.during_register = nullptr;
  EXPECT_EQ(cache.statistics().cached_regions, 0u);
  cache.put(raced);
}

TEST_F(RegistrationCacheTest, RefusedSubscriptionHandsOutUncached) {
  RegistrationCache& cache = make(limits(16));
  monitor_.refuse_subscribe = true;
  CacheEntry* entry = get(page(0), kPage);
  ASSERT_NE(entry, nullptr);
  const uint64_t id = FakeBackend::id_of(entry);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.cached_regions, 0u) << "an unwatched range must never be cached";
  EXPECT_EQ(stats.uncached, 1u);
  cache.put(entry);
  EXPECT_FALSE(backend_.is_live(id));
  monitor_.refuse_subscribe = false;
}

// ------------------------------------------------------------------ limits and eviction

TEST_F(RegistrationCacheTest, ClockGivesARecentlyHitEntryASecondChance) {
  RegistrationCache& cache = make(limits(3));
  const uint64_t a = touch(page(0), kPage);
  const uint64_t b = touch(page(2), kPage);
  const uint64_t c = touch(page(4), kPage);
  touch(page(0), kPage);  // hit: A is referenced
  EXPECT_EQ(cache.statistics().hits, 1u);

  const uint64_t d = touch(page(6), kPage);
  EXPECT_TRUE(backend_.is_live(a)) << "the recently hit entry was evicted first";
  EXPECT_FALSE(backend_.is_live(b)) << "the oldest unreferenced entry should go";
  EXPECT_TRUE(backend_.is_live(c));
  EXPECT_TRUE(backend_.is_live(d));
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.cached_regions, 3u);
  EXPECT_EQ(stats.invalidations, 0u);

  // A's second chance is spent: with nothing referenced, the sweep continues from the hand.
  const uint64_t e = touch(page(8), kPage);
  EXPECT_FALSE(backend_.is_live(c));
  EXPECT_TRUE(backend_.is_live(a));
  EXPECT_TRUE(backend_.is_live(e));
  const uint64_t f = touch(page(10), kPage);
  EXPECT_FALSE(backend_.is_live(a)) << "a second chance lasts one sweep only";
  EXPECT_TRUE(backend_.is_live(f));
  stats = cache.statistics();
  EXPECT_EQ(stats.evictions, 3u);
  EXPECT_EQ(stats.cached_regions, 3u);
}

TEST_F(RegistrationCacheTest, EvictionSkipsEntriesInUse) {
  RegistrationCache& cache = make(limits(2));
  CacheEntry* held = get(page(0), kPage);
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
  CacheEntry* a = get(page(0), kPage);
  CacheEntry* b = get(page(2), kPage);
  CacheEntry* c = get(page(4), kPage);
  ASSERT_TRUE(a && b && c);
  CacheStatistics stats = cache.statistics();
  EXPECT_EQ(stats.uncached, 1u);
  EXPECT_EQ(stats.cached_regions, 2u);
  EXPECT_EQ(stats.in_use_regions, 2u);
  EXPECT_EQ(stats.evictions, 0u);
  // The uncached one is still a working registration, private to its holder.
  CacheEntry* c_again = get(page(4), kPage);
  EXPECT_NE(c_again, c);
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

// Disabled: fails today.  make_room() evicts every unused entry before finding that the new
// region alone exceeds max_bytes, so the region is handed out uncached anyway and the cache is
// emptied for nothing (and cache_evictions counts it).  Enable once make_room() checks
// `bytes <= max_bytes` before evicting.
TEST_F(RegistrationCacheTest, RegionLargerThanTheByteLimitIsUncachedAndEvictsNothing) {
  RegistrationCache& cache = make(limits(100, 4 * kPage));
  const uint64_t a = touch(page(0), kPage);
  CacheEntry* big = get(page(16), 5 * kPage);
  ASSERT_NE(big, nullptr);
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
  CacheEntry* a = get(page(0), kPage);
  CacheEntry* b = get(page(0), kPage);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a, b);
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
  CacheEntry* held = get(page(20), 3 * kPage);
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
  CacheEntry* again = get(page(21), kPage);
  EXPECT_EQ(again, held);
  cache.put(again);
  cache.put(held);
}

TEST_F(RegistrationCacheTest, StatisticsAddUp) {
  RegistrationCache& cache = make(limits(2));
  touch(page(0), kPage);           // miss
  touch(page(0), kPage);           // hit
  CacheEntry* held = get(page(2), 2 * kPage);  // miss
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

// ------------------------------------------------------------------ threads

TEST_F(RegistrationCacheTest, ConcurrentHitsMissesAndInvalidationsStayConsistent) {
  RegistrationCache& cache = make(limits(24));
  constexpr int kThreads = 3;
  constexpr int kIterations = 3000;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t state = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(t + 1);
      for (int i = 0; i < kIterations; ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint64_t n = (state >> 33) % 32;
        Result<CacheEntry*> entry = cache.get(page(n), kPage, access_key());
        if (!entry.ok()) {
          bad.fetch_add(1);
          continue;
        }
        if (!(*entry)->contains(page(n), kPage) || !backend_.is_live(FakeBackend::id_of(*entry))) {
          bad.fetch_add(1);
        }
        cache.put(*entry);
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

}  // namespace
}  // namespace hmr::core
