// Hits served from the index slot alone, and what they rely on (cache/block_index.h,
// cache/registration_cache.h): the slot's copy of the registration, references counted in
// each thread's own table, and the held list that keeps an entry retired under such counts
// alive until its holders let go.  Under many threads and invalidations they are tested by
// registration_cache_test.cpp's stress tests, whose page-aligned ranges are served from the
// slot.
#include "tests/core/registration_cache_fixture.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace hmr::core {
namespace {

using namespace cache_test;

// A thread of its own that runs the steps handed to it one at a time, so a test can hold a
// reference on that thread across steps of its own.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    run(nullptr);
    thread_.join();
  }
  // Runs `step` on the worker (nullptr: ends it) and waits for it.
  void run(std::function<void()> step) {
    std::unique_lock<std::mutex> lock(mutex_);
    step_ = std::move(step);
    done_ = false;
    has_step_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return done_; });
  }

 private:
  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return has_step_; });
      has_step_ = false;
      std::function<void()> step = std::move(step_);
      const bool last = !step;
      if (step) step();
      done_ = true;
      changed_.notify_all();
      if (last) return;
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> step_;
  bool has_step_ = false;
  bool done_ = false;
  std::thread thread_;
};

bool served(RegistrationCache& cache, const CacheHandle& handle, uintptr_t start) {
  const BlockIndex::Slot* slot = RegistrationCacheTestPeer::slot_of(cache, handle, start);
  return slot != nullptr && (slot->meta & BlockIndex::kServedBit) != 0;
}

class SlotServedHitsTest : public RegistrationCacheTest {
 protected:
  // A hit of [start, +kPage) on `worker`'s thread, counted in that thread's own table.
  CacheHandle counted_hit_on(Worker& worker, uintptr_t start) {
    CacheHandle handle;
    worker.run([&] { handle = get(start, kPage); });
    EXPECT_NE(handle.counted_by, 0);
    EXPECT_NE(handle.counted_by, this_thread_slot().owner_id());
    return handle;
  }
};

TEST_F(SlotServedHitsTest, ASlotServedHitHandsOutTheSlotsCopyAndLeavesTheEntryAlone) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), 2 * kPage);
  CacheHandle hit = get(page(1), kPage);  // through the second block's slot
  ASSERT_EQ(FakeBackend::id_of(hit), id);
  EXPECT_TRUE(served(cache, hit, page(0)));
  EXPECT_TRUE(served(cache, hit, page(1)));
  EXPECT_EQ(reinterpret_cast<uint64_t>(hit.desc()), id) << "the slot's descriptor";
  EXPECT_EQ(hit.key_low_u64(), id) << "the slot's key";
  EXPECT_EQ(hit.counted_by, this_thread_slot().owner_id());
  EXPECT_EQ(hit.entry->state.load() & CacheEntry::kRefMask, CacheEntry::kZero)
      << "a slot-served hit counts in its thread's table, not in the entry";
  EXPECT_EQ(hit.entry->held_elsewhere.load(), 0);
  cache.put(hit);
  EXPECT_EQ(hit.entry->references(), 0u);
  EXPECT_EQ(cache.statistics().hits, 1u);
}

// A range that does not start and end on pages, or a key a slot cannot hold, is confirmed in
// the entry, and still hits.
TEST_F(SlotServedHitsTest, EntriesASlotCannotServeAreConfirmedInTheEntry) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t unaligned = touch(page(0) + 64, kPage);
  CacheHandle hit = get(page(0) + 128, 100);
  ASSERT_EQ(FakeBackend::id_of(hit), unaligned);
  EXPECT_FALSE(served(cache, hit, page(0) + 128));
  EXPECT_EQ(reinterpret_cast<uint64_t>(hit.desc()), unaligned);
  EXPECT_EQ(hit.key_low_u64(), unaligned);
  cache.put(hit);

  backend_.long_keys = true;
  backend_.odd_base = true;
  const uint64_t long_keyed = touch(page(4), kPage);
  CacheHandle again = get(page(4), kPage);
  ASSERT_EQ(FakeBackend::id_of(again), long_keyed);
  EXPECT_FALSE(served(cache, again, page(4))) << "a 16-byte key does not fit a slot";
  EXPECT_TRUE(again.entry->long_record);
  const nic::Registration registration = again.registration();
  ASSERT_EQ(registration.key.size, 16u);
  uint64_t halves[2];
  std::memcpy(halves, registration.key.bytes, sizeof halves);
  EXPECT_EQ(halves[0], long_keyed);
  EXPECT_EQ(halves[1], ~long_keyed) << "the key's high bytes, kept in the long record";
  EXPECT_EQ(registration.base_addr, page(4) + 0x1000);
  EXPECT_EQ(again.key_low_u64(), long_keyed);
  cache.put(again);
}

TEST_F(SlotServedHitsTest, ABaseAtTheStartOrZeroNeedsNoLongRecord) {
  RegistrationCache& cache = make(limits(16));
  CacheHandle at_start = get(page(0), kPage);
  EXPECT_FALSE(at_start.entry->long_record);
  EXPECT_EQ(at_start.registration().base_addr, page(0));
  EXPECT_EQ(at_start.registration().key.size, 8u);
  cache.put(at_start);
}

// Another thread's counted hit on an entry that is then invalidated: the entry waits on the
// held list, alive for that thread, and goes with that thread's put.
TEST_F(SlotServedHitsTest, AnEntryRetiredUnderAnotherThreadsCountDiesWithThatThreadsPut) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  Worker worker;
  const CacheHandle theirs = counted_hit_on(worker, page(0));
  monitor_.notify(page(0), page(1));
  EXPECT_TRUE(backend_.is_live(id)) << "deregistered under a thread that counts it";
  EXPECT_NE(touch(page(0), kPage), id) << "an invalidated entry is never hit";
  // The worker's other hits and puts go on; only the put of the held entry lets it go.
  worker.run([&] { EXPECT_NE(touch(page(0), kPage), id); });
  EXPECT_TRUE(backend_.is_live(id));
  worker.run([&] { cache.put(theirs); });
  EXPECT_FALSE(backend_.is_live(id)) << "the holder's put must deregister it";
}

// The same, retired on the thread that counts it and filed by another: the owner's put is the
// holder's put.
TEST_F(SlotServedHitsTest, AnEntryRetiredUnderItsOwnCountDiesWithItsPut) {
  RegistrationCache& cache = make(limits(16));
  Worker owner;
  uint64_t id = 0;
  CacheHandle held;
  owner.run([&] {
    id = touch(page(0), kPage);
    held = get(page(0), kPage);
  });
  owner.run([&] { monitor_.notify(page(0), page(1)); });  // memhooks: the unmapping thread
  EXPECT_TRUE(backend_.is_live(id));
  owner.run([&] { cache.put(held); });
  EXPECT_FALSE(backend_.is_live(id));
}

// A thread's count that only offsets references other threads closed for it (a debt) keeps
// nothing alive: the invalidation that finds nobody holding the entry deregisters it.
TEST_F(SlotServedHitsTest, ACountLeftByADebtDoesNotHoldARetiredEntry) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  Worker worker;
  const CacheHandle theirs = counted_hit_on(worker, page(0));
  cache.put(theirs);  // here: given back in state, the worker's count stays 1
  EXPECT_EQ(OwnerCounts::of(theirs.counted_by, theirs.entry), 1u);
  EXPECT_EQ(theirs.entry->references(), 0u);
  monitor_.notify(page(0), page(1));
  EXPECT_FALSE(backend_.is_live(id));
}

// A hit's count is visible for a moment before the hit looks at the slot again.  If the entry
// left the index meanwhile and its last other holder lets go in that moment, that holder sees
// the count and leaves the entry be; the hit, taking its count back, must then finalize it.
// (Found by review: the entry leaked, registered and subscribed, with nobody holding it.)
TEST_F(SlotServedHitsTest, ACountTakenBackFinalizesWhatItsMomentKeptAlive) {
  RegistrationCache& cache = make(limits(16));
  const CacheHandle shared = get(page(0), kPage);  // the miss's handle: a shared reference
  ASSERT_EQ(shared.counted_by, 0);
  const uint64_t id = FakeBackend::id_of(shared);
  CacheEntry& entry = *shared.entry;
  const unsigned me = this_thread_slot().owner_id();
  // A hit has read the slot; the entry leaves the index; the hit counts.
  monitor_.notify(page(0), page(1));
  uint32_t before = 0;
  ASSERT_TRUE(OwnerCounts::add(me, &entry, before));
  // The last other holder lets go and sees our count.
  Worker other;
  other.run([&] { cache.put(shared); });
  EXPECT_TRUE(backend_.is_live(id));
  // The hit sees the slot changed and takes its count back.
  RegistrationCacheTestPeer::take_back_stale_count(cache, entry, me);
  EXPECT_FALSE(backend_.is_live(id)) << "nobody holds it: whoever let go last must finalize it";
}

// Held by two threads, retired by a third: it lives until both let go, in either order.
TEST_F(SlotServedHitsTest, AHeldEntryWaitsForEveryThreadThatCountsIt) {
  RegistrationCache& cache = make(limits(16));
  const uint64_t id = touch(page(0), kPage);
  Worker first, second, retirer;
  const CacheHandle a = counted_hit_on(first, page(0));
  const CacheHandle b = counted_hit_on(second, page(0));
  ASSERT_NE(a.counted_by, b.counted_by);
  retirer.run([&] { monitor_.notify(page(0), page(1)); });
  EXPECT_TRUE(backend_.is_live(id));
  second.run([&] { cache.put(b); });
  EXPECT_TRUE(backend_.is_live(id)) << "the first thread still counts it";
  first.run([&] { cache.put(a); });
  EXPECT_FALSE(backend_.is_live(id));
}

}  // namespace
}  // namespace hmr::core
