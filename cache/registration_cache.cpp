#include "cache/registration_cache.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace hmr::core {
namespace {
struct PoolDeleter {
  CacheEntryPool* pool;
  void operator()(CacheEntry* entry) const { pool->release(entry); }
};
}  // namespace

RegistrationCache::RegistrationCache(CacheBackend& backend, CacheLimits limits, Monitor* monitor)
    : backend_(backend), limits_(limits), monitor_(monitor) {}

RegistrationCache::~RegistrationCache() {
  detach();  // no notification can run after this, so nothing more gets deferred
  flush();
}

Status RegistrationCache::attach() {
  if (monitor_ == nullptr || attached_) return ok_status();
  HMR_RETURN_IF_ERROR(monitor_->start());
  HMR_RETURN_IF_ERROR(monitor_->add_sink(this));
  attached_ = true;
  validate_hits_ = monitor_->checks_on_hit();
  return ok_status();
}

void RegistrationCache::detach() {
  if (!attached_) return;
  monitor_->remove_sink(this);  // waits for a notification in flight
  attached_ = false;
}

RegistrationCache::Hit RegistrationCache::lookup(uintptr_t start, uint64_t len,
                                                 const CacheKey& key, unsigned* reader) {
  const uint32_t tag = KeyTag::of(key);
  Hit hit;
  *reader = lock_.lock_shared();
  // In the index means not invalid: invalidation removes entries under the exclusive lock.
  // Everything below reads and writes the one slot; the entry is not touched.
  if (BlockIndex::Slot* slot = index_.find(start, len, key, tag)) {
    if (BlockIndex::take_hold(*slot)) {
      hit.handle = CacheHandle{slot->entry(), start, static_cast<uint8_t>(slot->level())};
      hit.entry_start = slot->start;
      hit.entry_end = slot->end;
    } else {
      hit.saturated = true;
    }
  }
  lock_.unlock_shared(*reader);
  return hit;
}

Result<CacheHandle> RegistrationCache::get(uintptr_t start, uint64_t len, const CacheKey& key) {
  bool saturated = false;
  if (limits_.max_count != 0) {
    if (monitor_ != nullptr && monitor_->has_pending()) monitor_->wait_pending();
    unsigned reader = 0;
    const Hit hit = lookup(start, len, key, &reader);
    if (hit.handle) {
      if (!validate_hits_ || monitor_->valid(hit.entry_start, hit.entry_end - hit.entry_start)) {
        // A plain increment of this thread's own slot: no locked instruction on the hit
        // path.  Only threads beyond the 64th share a slot, and may then lose a count.
        std::atomic<uint64_t>& hits = hit_counters_[reader].hits;
        hits.store(hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return hit.handle;
      }
      invalidate(hit.entry_start, hit.entry_end);  // the monitor says it changed: drop it
      put(hit.handle);
    }
    saturated = hit.saturated;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  finalize_deferred();
  return register_and_insert(start, len, key, /*may_cache=*/!saturated);
}

Result<CacheHandle> RegistrationCache::register_and_insert(uintptr_t start, uint64_t len,
                                                           const CacheKey& key, bool may_cache) {
  // Returned to the pool unless it is handed out below.
  std::unique_ptr<CacheEntry, PoolDeleter> entry(pool_.allocate(), PoolDeleter{&pool_});
  entry->start = start;
  entry->length = len;
  entry->key = key;
  entry->level = static_cast<uint8_t>(BlockIndex::level_for(start, len));

  const bool caching = may_cache && limits_.max_count != 0 && BlockIndex::indexable(start, len);
  const uint64_t sequence = invalidation_sequence_.load(std::memory_order_acquire);
  bool subscribed = false;
  if (caching && monitor_ != nullptr) subscribed = monitor_->subscribe(start, len).ok();
  Result<nic::Registration> registered = backend_.register_range(start, len, key);
  if (!registered.ok()) {
    if (subscribed) monitor_->unsubscribe(start, len);
    return registered.status();
  }
  entry->registration = *registered;
  entry->subscribed = subscribed;

  bool inserted = false;
  CacheEntry* dead = nullptr;
  BlockIndex::Table spare;  // a larger index table, allocated with the lock released
  if (caching && (subscribed || monitor_ == nullptr)) {
    const size_t slots = BlockIndex::slots_needed(*entry);
    const uint32_t tag = KeyTag::of(key);
    for (;;) {
      lock_.lock();
      size_t capacity = index_.capacity_for(slots);
      if (capacity != 0 && spare.capacity >= capacity) {
        spare = index_.adopt(std::move(spare));  // the old table is freed after unlock
        capacity = 0;
      }
      if (capacity == 0) {
        if (!invalidated_since(sequence, start, start + len) && make_room(len, dead)) {
          // The caller's reference goes in the slot of the first block: its start is the
          // entry's start, so that is the slot put() will look in.
          index_.insert(entry.get(), tag, /*first_holds=*/1);
          ++count_;
          bytes_ += len;
          inserted = true;
        }
        lock_.unlock();
        break;
      }
      lock_.unlock();
      spare = BlockIndex::make_table(capacity);
    }
  }
  finalize_all(dead);
  const uint8_t level = entry->level;
  if (inserted) return CacheHandle{entry.release(), start, level};
  // Handed out once: the last put() deregisters it.
  entry->state.store(CacheEntry::kInvalid | 1, std::memory_order_relaxed);
  uncached_.fetch_add(1, std::memory_order_relaxed);
  return CacheHandle{entry.release(), start, CacheHandle::kUnindexed};
}

bool RegistrationCache::invalidated_since(uint64_t sequence, uintptr_t start,
                                          uintptr_t end) const {
  const uint64_t now = invalidation_sequence_.load(std::memory_order_relaxed);
  if (now - sequence >= kRecent) return now != sequence;  // too many to check: assume yes
  for (uint64_t s = sequence + 1; s <= now; ++s) {
    const RecentInvalidation& recent = recent_[s % kRecent];
    if (recent.start < end && start < recent.end) return true;
  }
  return false;
}

void RegistrationCache::put(const CacheHandle& handle) {
  if (handle.level != CacheHandle::kUnindexed) {
    const uint64_t block = handle.start >> BlockIndex::kLevelShift[handle.level];
    const unsigned reader = lock_.lock_shared();
    BlockIndex::Slot* slot = index_.slot_of(handle.entry, handle.level, block);
    if (slot != nullptr) BlockIndex::drop_hold(*slot);
    lock_.unlock_shared(reader);
    if (slot != nullptr) return;
    // Not in the index any more: retire() moved this reference into entry->state.
  }
  release_unindexed(handle.entry);
}

void RegistrationCache::release_unindexed(CacheEntry* entry) {
  const uint32_t previous = entry->state.fetch_sub(1, std::memory_order_acq_rel);
  if (previous == (CacheEntry::kInvalid | 1)) finalize(entry);
}

uint64_t RegistrationCache::holds_of(BlockIndex::Slot& first_slot) const {
  uint64_t holds = 0;
  index_.for_each_slot_of(first_slot, [&](BlockIndex::Slot& slot) { holds += slot.hold_count(); });
  return holds;
}

void RegistrationCache::retire(CacheEntry* entry, CacheEntry*& dead) {
  const uint64_t holds = index_.erase(entry);
  --count_;
  bytes_ -= entry->length;
  // Last touch while a holder may still be out there: from now on its put() finds no slot
  // and counts down entry->state, and may finalize the entry at any moment.
  entry->state.fetch_add(static_cast<uint32_t>(holds) | CacheEntry::kInvalid,
                         std::memory_order_acq_rel);
  if (holds == 0) {
    entry->next = dead;
    dead = entry;
  }
}

CacheEntry* RegistrationCache::clock_victim() {
  // The hand judges an entry at its first slot.  A hit sets a slot's recency to 2 and filing
  // to 1 (a new entry outlives one pass, as behind a classic CLOCK hand); each pass lowers
  // it.  Three passes at most: two bring anything to 0, the third finds an unused entry if
  // there is one.
  const size_t capacity = index_.capacity();
  for (size_t step = 0; step < 3 * capacity; ++step) {
    if (clock_hand_ >= capacity) clock_hand_ = 0;
    BlockIndex::Slot& first = index_.slot_at(clock_hand_++);
    if (first.empty() || first.delta() != 0) continue;
    uint64_t holds = 0;
    uint32_t recency = 0;
    index_.for_each_slot_of(first, [&](BlockIndex::Slot& slot) {
      holds += slot.hold_count();
      recency = std::max(recency, slot.recency());
    });
    if (holds != 0) continue;
    if (recency == 0) return first.entry();
    // Exclusive lock: no hit can change a slot meanwhile, plain writes are enough.
    const uint32_t lowered = (recency - 1) << BlockIndex::kRecencyShift;
    index_.for_each_slot_of(first, [&](BlockIndex::Slot& slot) {
      slot.holds = (slot.holds & ~BlockIndex::kRecencyMask) | lowered;
    });
  }
  return nullptr;
}

bool RegistrationCache::make_room(uint64_t bytes, CacheEntry*& dead) {
  if (limits_.max_bytes != 0 && bytes > limits_.max_bytes) return false;  // never fits: evict nothing
  while (count_ + 1 > limits_.max_count ||
         (limits_.max_bytes != 0 && bytes_ + bytes > limits_.max_bytes)) {
    CacheEntry* victim = clock_victim();
    if (victim == nullptr) return false;  // everything is in use: hand this one out uncached
    retire(victim, dead);
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void RegistrationCache::invalidate(uintptr_t start, uintptr_t end) {
  CacheEntry* dead = nullptr;
  lock_.lock();
  const uint64_t sequence = invalidation_sequence_.load(std::memory_order_relaxed) + 1;
  recent_[sequence % kRecent] = RecentInvalidation{sequence, start, end};
  invalidation_sequence_.store(sequence, std::memory_order_release);
  // Collect first (the index must not change while it is walked); an entry filed under
  // several blocks is met once per block.
  CacheEntry* victims = nullptr;
  index_.for_each_overlapping(start, end, [&](CacheEntry* entry) {
    if (entry->collected) return;
    entry->collected = true;
    entry->next = victims;
    victims = entry;
  });
  while (victims != nullptr) {
    CacheEntry* entry = victims;
    victims = entry->next;
    retire(entry, dead);
    invalidations_.fetch_add(1, std::memory_order_relaxed);
  }
  lock_.unlock();
  finalize_all(dead);
}

void RegistrationCache::flush() {
  finalize_deferred();
  CacheEntry* dead = nullptr;
  lock_.lock();
  CacheEntry* unused = nullptr;
  for (size_t i = 0; i < index_.capacity(); ++i) {
    BlockIndex::Slot& first = index_.slot_at(i);
    if (first.empty() || first.delta() != 0 || holds_of(first) != 0) continue;
    first.entry()->next = unused;
    unused = first.entry();
  }
  while (unused != nullptr) {
    CacheEntry* entry = unused;
    unused = entry->next;
    retire(entry, dead);
  }
  lock_.unlock();
  finalize_all(dead);
}

void RegistrationCache::finalize(CacheEntry* entry) {
  if (entry->subscribed) monitor_->unsubscribe(entry->start, entry->length);
  backend_.deregister(entry->registration);
  pool_.release(entry);
}

void RegistrationCache::finalize_all(CacheEntry* dead) {
  if (dead != nullptr && Monitor::on_event_thread()) {
    CacheEntry* tail = dead;
    while (tail->next != nullptr) tail = tail->next;
    tail->next = deferred_.load(std::memory_order_relaxed);
    while (!deferred_.compare_exchange_weak(tail->next, dead, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
    return;
  }
  while (dead != nullptr) {
    CacheEntry* next = dead->next;
    finalize(dead);
    dead = next;
  }
}

void RegistrationCache::finalize_deferred() {
  if (deferred_.load(std::memory_order_relaxed) == nullptr) return;
  finalize_all(deferred_.exchange(nullptr, std::memory_order_acquire));
}

CacheStatistics RegistrationCache::statistics() {
  finalize_deferred();
  CacheStatistics stats;
  for (const HitCounter& counter : hit_counters_) stats.hits += counter.hits.load(std::memory_order_relaxed);
  stats.misses = misses_.load(std::memory_order_relaxed);
  stats.invalidations = invalidations_.load(std::memory_order_relaxed);
  stats.evictions = evictions_.load(std::memory_order_relaxed);
  stats.uncached = uncached_.load(std::memory_order_relaxed);
  lock_.lock();
  stats.cached_regions = count_;
  stats.cached_bytes = bytes_;
  for (size_t i = 0; i < index_.capacity(); ++i) {
    BlockIndex::Slot& first = index_.slot_at(i);
    if (!first.empty() && first.delta() == 0 && holds_of(first) != 0) ++stats.in_use_regions;
  }
  lock_.unlock();
  return stats;
}

}  // namespace hmr::core
