// core::RegistrationCache — per-domain cache of NIC registrations.
//
// get() finds an entry whose range contains the request and whose CacheKey matches (a hit:
// one hash probe per populated index level, a reference count, no allocation, no exclusive
// lock), or registers on a miss: the NIC call runs with no lock held, then the entry is
// inserted under the exclusive lock if no invalidation touched its range meanwhile.
// A hit reads the index slot it finds and counts a reference in the entry, whose key and
// descriptor the caller reads next anyway; put() is one atomic decrement, under no lock.
// Entries die when the monitor reports their range changed; one still in use stays valid
// for its holders and is deregistered by the last put().  Unused entries are evicted by
// CLOCK (a hand sweeping the slot table) when the count or byte limit is reached.
// Deregistration always happens after the lock is released (a dead list through the entries).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cache/block_index.h"
#include "cache/cache_entry.h"
#include "cache/cache_handle.h"
#include "cache/entry_pool.h"
#include "monitor/monitor.h"
#include "util/sharded_counters.h"
#include "util/sharded_rw_lock.h"
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

  // A reference to an entry containing [start, start+len); release it with put().
  Result<CacheHandle> get(uintptr_t start, uint64_t len, const CacheKey& key);
  // The same when it is a hit; an empty handle (nothing registered, no miss counted) when it
  // is not.  The C ABI's hit path asks this first and leaves a miss to the domain's full path.
  CacheHandle find(uintptr_t start, uint64_t len, const CacheKey& key);
  void put(const CacheHandle& handle);
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
  };
  Hit lookup(uintptr_t start, uint64_t len, const CacheKey& key);
  // Whether a hit may be handed out: the monitor's verdict for monitors that check on every
  // hit; otherwise yes.  A stale hit is invalidated and released here.
  bool still_valid(const Hit& hit) { return !validate_hits_ || still_valid_slow(hit); }
  bool still_valid_slow(const Hit& hit);
  // Lets the monitor's thread finish invalidations it has already read (an unmapper may have
  // returned from munmap before its entries left the index).
  void wait_for_monitor() {
    if (monitor_ != nullptr && monitor_->has_pending()) monitor_->wait_pending();
  }
  // `may_cache` false: register and hand out uncached (a saturated slot).
  Result<CacheHandle> register_and_insert(uintptr_t start, uint64_t len, const CacheKey& key,
                                          bool may_cache);
  bool invalidated_since(uint64_t sequence, uintptr_t start, uintptr_t end) const;
  bool make_room(uint64_t bytes, CacheEntry*& dead);
  CacheEntry* clock_victim();
  // One more reference on an entry found in the index; false at CacheEntry::kMaxRefs.
  static bool take_reference(CacheEntry& entry);
  void retire(CacheEntry* entry, CacheEntry*& dead);  // out of the index (locked)
  void finalize(CacheEntry* entry);
  // Deregisters and frees `dead` now, or, on a monitor's event thread, hands it to the next
  // cache call on another thread.
  void finalize_all(CacheEntry* dead);
  void finalize_deferred();

  CacheEntryPool pool_;  // first member destroyed last: entries live in it
  CacheBackend& backend_;
  const CacheLimits limits_;
  Monitor* monitor_;
  bool attached_ = false;
  bool validate_hits_ = false;  // the monitor wants valid() asked on every hit

  ShardedRwLock lock_;
  BlockIndex index_;
  size_t clock_hand_ = 0;  // slot index the CLOCK sweep resumes at; lock_ (exclusive)
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

  ShardedCounters<1> hits_;
  std::atomic<uint64_t> misses_{0}, invalidations_{0}, evictions_{0}, uncached_{0};
  std::atomic<CacheEntry*> deferred_{nullptr};  // dead entries left by a monitor thread
};

// The hit path, inline: the C ABI's hmr_mr_reg reaches it through one call.

inline bool RegistrationCache::take_reference(CacheEntry& entry) {
  // One locked add, no compare-exchange loop.  kMaxRefs leaves bit 30 as headroom, so adds
  // racing past the limit (each undone at once) can never reach kInvalid.
  const uint32_t seen = entry.state.fetch_add(1, std::memory_order_acquire);
  if ((seen & CacheEntry::kRefMask) >= CacheEntry::kMaxRefs) {
    entry.state.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  // Unordered and only when it changes: the hand reads it under the exclusive lock, and a
  // lost update costs at most one early eviction.
  if (entry.recency.load(std::memory_order_relaxed) != CacheEntry::kHitRecency) {
    entry.recency.store(CacheEntry::kHitRecency, std::memory_order_relaxed);
  }
  return true;
}

inline RegistrationCache::Hit RegistrationCache::lookup(uintptr_t start, uint64_t len,
                                                 const CacheKey& key) {
  const uint32_t tag = KeyTag::of(key);
  Hit hit;
  const ThreadSlot reader = lock_.lock_shared();
  // In the index means not invalid: invalidation removes entries under the exclusive lock,
  // so the reference taken here is on a live entry.
  if (BlockIndex::Slot* slot = index_.find(start, len, key, tag)) {
    CacheEntry* entry = slot->entry();
    if (take_reference(*entry)) {
      hit.handle = CacheHandle{entry};
      hit.entry_start = entry->start;
      hit.entry_end = entry->end();
    } else {
      hit.saturated = true;
    }
  }
  lock_.unlock_shared(reader);
  return hit;
}

inline CacheHandle RegistrationCache::find(uintptr_t start, uint64_t len, const CacheKey& key) {
  if (limits_.max_count == 0) return {};
  wait_for_monitor();
  const Hit hit = lookup(start, len, key);
  if (!hit.handle || !still_valid(hit)) return {};
  hits_.add(0, 1);
  return hit.handle;
}

inline void RegistrationCache::put(const CacheHandle& handle) {
  CacheEntry* entry = handle.entry;
  const uint32_t previous = entry->state.fetch_sub(1, std::memory_order_acq_rel);
  if (previous == (CacheEntry::kInvalid | 1)) finalize(entry);  // the last user of a dead entry
}

}  // namespace hmr::core
