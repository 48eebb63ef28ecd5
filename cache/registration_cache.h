// core::RegistrationCache — per-domain cache of NIC registrations.
//
// get() finds an entry whose range contains the request and whose CacheKey matches (a hit:
// one hash probe per populated index level, a reference count, no allocation, no lock), or
// registers on a miss: the NIC call runs with no lock held, then the entry is inserted under
// the writer mutex if no invalidation touched its range meanwhile.
// A hit takes no lock at all: it enters a read section (util/read_sections.h: a plain store
// to the thread's own slot), probes the index beside any writer, and counts a reference in
// the entry before it trusts the entry's range and key (entries are recycled only after a
// grace period: cache/entry_pool.h).  The thread that filed an entry counts its references
// with plain stores (owner references, cache/cache_entry.h); other threads with one locked
// add, and put() gives either back the same way.  Writers (insert, invalidate, evict) take
// the writer mutex and never wait for readers, except that a grown index table is freed only
// after a grace period, and that deciding whether an owner still holds an entry it retired
// costs one heavy fence per batch of retired entries.
// Entries die when the monitor reports their range changed; one still in use stays valid
// for its holders and is deregistered by the last put().  Unused entries are evicted by
// CLOCK (a hand sweeping the slot table) when the count or byte limit is reached.
// Deregistration always happens after the writer mutex is released (a dead list through the
// entries).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "cache/block_index.h"
#include "cache/cache_entry.h"
#include "cache/cache_handle.h"
#include "cache/entry_pool.h"
#include "monitor/monitor.h"
#include "util/sharded_counters.h"
#include "util/read_sections.h"
#include "util/status.h"

namespace hmr::core {

// The registration the cache stands in front of.
class CacheBackend {
 public:
  virtual Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                                   const CacheKey& key) = 0;
  virtual void deregister(nic::Registration& registration) = 0;

 protected:
  ~CacheBackend() = default;
};

struct CacheLimits {
  size_t max_count = 1024;  // 0 disables caching: every get() registers, every put() deregisters
  uint64_t max_bytes = 0;   // 0: no byte limit
};

struct CacheStatistics {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t invalidations = 0;   // entries killed by monitor events
  uint64_t evictions = 0;       // unused entries dropped for the limits
  uint64_t uncached = 0;        // registrations handed out without caching them
  uint64_t cached_regions = 0;
  uint64_t cached_bytes = 0;
  uint64_t in_use_regions = 0;  // cached entries with at least one holder
};

class RegistrationCache final : public InvalidationSink {
 public:
  RegistrationCache(CacheBackend& backend, CacheLimits limits, Monitor* monitor);
  ~RegistrationCache();  // every entry must have been put() back

  // Joins the monitor (starting it).  A cache built without a monitor caches blindly: only
  // for address spaces the caller controls (benchmarks); domains disable caching instead.
  Status attach();
  void detach();
  // A forked child's copy of the cache: nothing watches its memory any more, so it hands out
  // nothing it holds and files nothing new; registrations go uncached (InvalidationSink).
  void watch_lost_by_fork() override;

  // What a caller already knows of [start, start+len) when it calls get() after find() in the
  // same request.  `absent`: find() met no entry that could serve it (none, or only dead ones
  // or other ranges), so get() registers at once instead of probing the index a second time.
  // An entry filed by another thread in between is then not found; the two registrations
  // both stay valid, as when two threads miss at once (the probe in get() narrowed that window,
  // it never closed it).  A saturated entry is not `absent`: get() must look to learn that.
  enum class Probe : uint8_t { not_done, absent };
  // A reference to an entry containing [start, start+len); release it with put().
  Result<CacheHandle> get(uintptr_t start, uint64_t len, const CacheKey& key,
                          Probe probed = Probe::not_done);
  // The same when it is a hit; an empty handle (nothing registered, no miss counted) when it
  // is not.  The C ABI's hit path asks this first and leaves a miss to the domain's full path.
  // The key comes by value, in registers: the caller builds it from the domain's key and the
  // request's access bits, and a copy through memory would stall on the partial store.
  CacheHandle find(uintptr_t start, uint64_t len, CacheKey key) {
    Probe probed = Probe::not_done;
    return find(start, len, key, this_thread_slot(), probed);
  }
  // The hit path's find() and put(), with the calling thread's slot (this_thread_slot())
  // passed in: it is asked once per call of the C ABI, not once per layer.
  // Inlined into the hit path, which is its one hot caller: the call would cost more than the
  // lookup's own arithmetic.  `probed` says how a lookup without a hit ended, for the
  // registration the caller makes next (get()).
  [[gnu::always_inline]] CacheHandle find(uintptr_t start, uint64_t len, CacheKey key,
                                          ThreadSlot slot, Probe& probed);
  void put(const CacheHandle& handle) { put(handle, this_thread_slot()); }
  void put(const CacheHandle& handle, ThreadSlot slot);
  // put(), and the entry leaves the cache too when this was its only holder, so its
  // registration goes now instead of staying for later hits (an MR re-registered away from it
  // revokes what it reached).  With other holders it stays, unchanged for them.
  void put_and_drop_if_unused(const CacheHandle& handle);

  void invalidate(uintptr_t start, uintptr_t end) override;
  // Drops every unused entry (domain close, tests).
  void flush();
  CacheStatistics statistics();
  const CacheLimits& limits() const { return limits_; }

 private:
  friend class RegistrationCacheTestPeer;  // white-box tests (index slots)

  struct Hit {
    CacheHandle handle;
    uintptr_t entry_start = 0;  // the entry's range, for a monitor that validates hits
    uintptr_t entry_end = 0;
    bool saturated = false;  // found, but the entry already carries CacheEntry::kMaxRefs
    bool in_debt = false;    // an owner's hit on an entry whose debt passed kMaxDebt
    CacheEntry* orphans = nullptr;  // dead entries whose last reference the probe dropped
  };
  // The probe in a read section, then the finalization of what it orphaned, outside it.
  // Inlined into find(): the hit path is one function from the C ABI down.
  [[gnu::always_inline]] Hit lookup(uintptr_t start, uint64_t len, const CacheKey& key,
                                    ThreadSlot slot);
  // Whether a hit may be handed out: the monitor's verdict for monitors that check on every
  // hit; otherwise yes.  A stale hit is invalidated and released here.
  bool still_valid(const Hit& hit) { return !validate_hits_ || still_valid_slow(hit); }
  bool still_valid_slow(const Hit& hit);
  // Lets the monitor's thread finish invalidations it has already read (an unmapper may have
  // returned from munmap before its entries left the index).
  void wait_for_monitor() {
    if (monitor_ != nullptr && monitor_->has_pending()) monitor_->wait_pending();
  }
  // What retire() leaves for after the writer mutex: entries to finalize, and owned entries
  // whose owner's count can be read only after a heavy fence (finish()).  Both lists run
  // through `next`; an unsettled entry carries a shared reference of ours, so nobody else
  // finalizes it (and rewrites its `next`) before finish() drops it.
  struct Retired {
    CacheEntry* dead = nullptr;
    CacheEntry* unsettled = nullptr;
  };
  // `may_cache` false: register and hand out uncached (a saturated slot).
  Result<CacheHandle> register_and_insert(uintptr_t start, uint64_t len, const CacheKey& key,
                                          bool may_cache);
  bool invalidated_since(uint64_t sequence, uintptr_t start, uintptr_t end) const;
  bool make_room(uint64_t bytes, Retired& retired);
  CacheEntry* clock_victim();
  // A reference on a candidate the index showed us, kept only if the entry is live, below
  // CacheEntry::kMaxRefs and matches the request; otherwise given back at once (onto
  // hit.orphans if that was a dead entry's last reference).  An owner reference when the
  // calling thread (`owner_id`, 0 for none) owns the entry, a shared one otherwise.
  [[gnu::always_inline]] static bool take_if_match(CacheEntry& entry, uintptr_t start,
                                                   uint64_t len, const CacheKey& key,
                                                   unsigned owner_id, Hit& hit);
  // Refusals, off the hit path: the reference taken back (a shared one, or the owner's, whose
  // count goes back to `owned`), the entry finalized through hit.orphans if that was a dead
  // entry's last reference, hit.saturated set when `saturated`.
  [[gnu::cold, gnu::noinline]] static void refuse_shared(CacheEntry& entry, bool saturated,
                                                         Hit& hit);
  [[gnu::cold, gnu::noinline]] static void refuse_owned(CacheEntry& entry, uint32_t owned,
                                                        bool saturated, Hit& hit);
  // A reference dropped, in a read section: true when it was the last of an entry out of the
  // index and this caller won its finalization.  A shared one (or an owner's closed on another
  // thread) is given back in state, below kZero if need be; the owner's count goes to `owned`.
  static bool drop_shared(CacheEntry& entry);
  static bool drop_owned(CacheEntry& entry, uint32_t owned) {
    return !set_owned_still_live(entry, owned) && last_owned_of_dead(entry, owned);
  }
  // After the owner changed its count: whether the entry is still in the index (the common
  // answer, which needs no decision).  set_owned_still_live() sets the count to `owned` first.
  [[gnu::always_inline]] static bool owned_still_live(const CacheEntry& entry);
  [[gnu::always_inline]] static bool set_owned_still_live(CacheEntry& entry, uint32_t owned);
  // drop_owned() on an entry that left the index while the owner held it: deciding needs a
  // real fence against shared drops, which read the owner's count after their own locked
  // instruction.
  [[gnu::cold, gnu::noinline]] static bool last_owned_of_dead(CacheEntry& entry,
                                                              uint32_t owned);
  // The rest of put(), out of the owner's inline path, leaving the section `slot` entered: a
  // shared reference (or an owner's closed on another thread), and the owner's last look at
  // an entry that left the index while it held it.  Tail calls, so the inline path keeps
  // nothing live across them.
  void put_shared(CacheEntry& entry, ThreadSlot slot);
  [[gnu::cold, gnu::noinline]] void put_owned_of_dead(CacheEntry& entry, uint32_t owned,
                                                      ThreadSlot slot);
  // The owner moves the references other threads gave back in `state` out of its own count
  // (cache_entry.h, kMaxDebt).  Under the writer mutex, on a live entry: nobody decides about
  // it meanwhile, so the sum may be too high for a moment but is never too low.
  [[gnu::cold, gnu::noinline]] void repay_debt(CacheEntry& entry);

  void retire(CacheEntry* entry, Retired& retired);  // out of the index (locked)
  // One heavy fence for all of retired.unsettled, then each finalized if unreferenced; then
  // every dead entry finalized (finalize_all).  Outside the writer mutex.
  void finish(Retired& retired);
  void finalize(CacheEntry* entry);
  // Deregisters and frees `dead` now, or, on a monitor's event thread, hands it to the next
  // cache call on another thread.
  void finalize_all(CacheEntry* dead);
  void finalize_deferred();

  CacheEntryPool pool_{readers_};  // first member destroyed last: entries live in it
  CacheBackend& backend_;
  CacheLimits limits_;  // max_count becomes 0 in a forked child (watch_lost_by_fork)
  Monitor* monitor_;
  bool attached_ = false;
  bool validate_hits_ = false;  // the monitor wants valid() asked on every hit

  ReadSections readers_;  // hits; a grown table is freed after their grace period
  std::mutex writer_;     // every change of the index, the counts and the CLOCK hand
  BlockIndex index_;
  size_t clock_hand_ = 0;  // slot index the CLOCK sweep resumes at; writer_
  size_t count_ = 0;
  uint64_t bytes_ = 0;

  struct RecentInvalidation {
    uint64_t sequence = 0;
    uintptr_t start = 0;
    uintptr_t end = 0;
  };
  static constexpr unsigned kRecent = 64;
  RecentInvalidation recent_[kRecent];
  std::atomic<uint64_t> invalidation_sequence_{0};

  // Hits and misses, counted by the thread that looked (per-thread lines, no locked add).
  enum Lookup : size_t { kHit, kMiss };
  ShardedCounters<2> lookups_;
  std::atomic<uint64_t> invalidations_{0}, evictions_{0}, uncached_{0};
  std::atomic<CacheEntry*> deferred_{nullptr};  // dead entries left by a monitor thread
};

// The hit path, inline: the C ABI's hmr_mr_reg reaches it through one call.

inline bool RegistrationCache::owned_still_live(const CacheEntry& entry) {
  light_fence();  // the owner's count before the state below (a retirer's heavy fence pairs)
  return __builtin_expect(
      (entry.state.load(std::memory_order_acquire) & CacheEntry::kLive) != 0, 1);
}

inline bool RegistrationCache::set_owned_still_live(CacheEntry& entry, uint32_t owned) {
  (void)OwnerCounts::set(entry.owner, &entry, owned);  // a lower count: always kept
  return owned_still_live(entry);
}

inline bool RegistrationCache::take_if_match(CacheEntry& entry, uintptr_t start, uint64_t len,
                                             const CacheKey& key, unsigned owner_id, Hit& hit) {
  // Ours: counted in our own table with plain stores, unless its two places for this entry
  // hold others' counts (cache/owner_counts.h), when the reference is taken shared below.
  uint32_t owned = 0;
  if (owner_id != 0 && entry.owner == owner_id &&
      __builtin_expect(OwnerCounts::add(owner_id, &entry, owned), 1)) {
    // The count first, then the look at state, as a shared reader does; a retirer reads the
    // count only after a heavy fence (cache_entry.h).
    light_fence();
    const uint32_t seen = entry.state.load(std::memory_order_acquire);
    // Live: its range and key were published by filing it and cannot change while we hold it.
    if (__builtin_expect((seen & CacheEntry::kLive) == 0 || !entry.matches(start, len, key), 0)) {
      refuse_owned(entry, owned, /*saturated=*/false, hit);
      return false;
    }
    if (__builtin_expect((seen & CacheEntry::kRefMask) + owned >=
                             CacheEntry::kZero + CacheEntry::kMaxRefs, 0)) {
      refuse_owned(entry, owned, /*saturated=*/true, hit);
      return false;
    }
    hit.handle.owned = true;
    hit.in_debt = (seen & CacheEntry::kRefMask) < CacheEntry::kZero - CacheEntry::kMaxDebt;
  } else {
    // One locked add, no compare-exchange loop: whatever state the entry is in, an add undone
    // by refuse_shared() leaves it as it was (cache/cache_entry.h).
    const uint32_t seen = entry.state.fetch_add(1, std::memory_order_acquire);
    if (__builtin_expect((seen & CacheEntry::kLive) == 0 || !entry.matches(start, len, key), 0)) {
      refuse_shared(entry, /*saturated=*/false, hit);  // left the index (or another range)
      return false;
    }
    // The owner's part taken at its most (OwnerCounts::kMaxCount) rather than read: reading
    // it would pull the owner's own table, which the owner writes on every hit, into this
    // thread's cache on every hit.  The limit only keeps counts from overflowing.
    if (__builtin_expect((seen & CacheEntry::kRefMask) + OwnerCounts::kMaxCount >=
                             CacheEntry::kZero + CacheEntry::kMaxRefs, 0)) {
      refuse_shared(entry, /*saturated=*/true, hit);
      return false;
    }
  }
  // Unordered and only when it changes: the hand reads it under the writer mutex, and a lost
  // update costs at most one early eviction.
  if (entry.recency.load(std::memory_order_relaxed) != CacheEntry::kHitRecency) {
    entry.recency.store(CacheEntry::kHitRecency, std::memory_order_relaxed);
  }
  return true;
}

inline RegistrationCache::Hit RegistrationCache::lookup(uintptr_t start, uint64_t len,
                                                        const CacheKey& key, ThreadSlot slot) {
  Hit hit;
  CacheEntry* entry;
  {
    const ReadSection section(readers_, slot);  // keeps the table we probe from being freed
    const unsigned owner_id = slot.owner_id();
    entry = index_.find_if(
        start, KeyTag::of(key), [&](CacheEntry& candidate) __attribute__((always_inline)) {
          return take_if_match(candidate, start, len, key, owner_id, hit);
        });
  }
  if (__builtin_expect(hit.orphans != nullptr, 0)) finalize_all(hit.orphans);
  if (__builtin_expect(hit.in_debt, 0)) repay_debt(*entry);  // we hold it: it stays an entry
  if (entry != nullptr) {  // hit.handle.owned was set only with a match
    hit.handle.entry = entry;
    hit.entry_start = entry->start;
    hit.entry_end = entry->end();
  }
  return hit;
}

inline CacheHandle RegistrationCache::find(uintptr_t start, uint64_t len, CacheKey key,
                                           ThreadSlot slot, Probe& probed) {
  if (limits_.max_count == 0) return {};
  wait_for_monitor();
  const Hit hit = lookup(start, len, key, slot);
  if (!hit.handle) {
    if (!hit.saturated) probed = Probe::absent;
    return {};
  }
  if (!still_valid(hit)) return {};
  lookups_.add(slot, kHit, 1);
  return hit.handle;
}

inline void RegistrationCache::put(const CacheHandle& handle, ThreadSlot slot) {
  CacheEntry& entry = *handle.entry;
  // Once our reference is dropped the entry may be finalized by someone else; the section
  // keeps it from being recycled while we still look at it (cache/entry_pool.h).
  readers_.enter(slot);
  if (__builtin_expect(handle.owned && entry.owner == slot.owner_id(), 1)) {
    const uint32_t owned = OwnerCounts::remove(entry.owner, &entry);
    if (owned_still_live(entry)) {
      readers_.leave(slot);
      return;
    }
    put_owned_of_dead(entry, owned, slot);
    return;
  }
  put_shared(entry, slot);
}

}  // namespace hmr::core
