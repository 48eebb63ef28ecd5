#include "core/cache/registration_cache.h"

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

CacheEntry* RegistrationCache::lookup(uintptr_t start, uint64_t len, const CacheKey& key,
                                      unsigned* slot_out) {
  const unsigned slot = lock_.lock_shared();
  *slot_out = slot;
  CacheEntry* entry = index_.find(start, len, key);
  if (entry != nullptr) {
    // In the index means not invalid: invalidation removes entries under the exclusive lock.
    entry->state.fetch_add(1, std::memory_order_acquire);
    if (entry->referenced.load(std::memory_order_relaxed) == 0) {
      entry->referenced.store(1, std::memory_order_relaxed);
    }
  }
  lock_.unlock_shared(slot);
  return entry;
}

Result<CacheEntry*> RegistrationCache::get(uintptr_t start, uint64_t len, const CacheKey& key) {
  if (limits_.max_count != 0) {
    if (monitor_ != nullptr && monitor_->has_pending()) monitor_->wait_pending();
    unsigned slot = 0;
    if (CacheEntry* entry = lookup(start, len, key, &slot)) {
      if (!validate_hits_ || monitor_->valid(entry->start, entry->length)) {
        // A plain increment of this thread's own slot: no locked instruction on the hit
        // path.  Only threads beyond the 64th share a slot, and may then lose a count.
        std::atomic<uint64_t>& hits = hit_counters_[slot].hits;
        hits.store(hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return entry;
      }
      invalidate(entry->start, entry->end());  // the monitor says it changed: drop it
      put(entry);
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  finalize_deferred();
  return register_and_insert(start, len, key);
}

Result<CacheEntry*> RegistrationCache::register_and_insert(uintptr_t start, uint64_t len,
                                                           const CacheKey& key) {
  // Returned to the pool unless it is handed out below.
  std::unique_ptr<CacheEntry, PoolDeleter> entry(pool_.allocate(), PoolDeleter{&pool_});
  entry->start = start;
  entry->length = len;
  entry->key = key;
  entry->level = static_cast<uint8_t>(BlockIndex::level_for(start, len));
  entry->state.store(1, std::memory_order_relaxed);

  const bool caching = limits_.max_count != 0;
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
    for (;;) {
      lock_.lock();
      size_t capacity = index_.capacity_for(slots);
      if (capacity != 0 && spare.capacity >= capacity) {
        spare = index_.adopt(std::move(spare));  // the old table is freed after unlock
        capacity = 0;
      }
      if (capacity == 0) {
        if (!invalidated_since(sequence, start, start + len) && make_room(len, dead)) {
          index_.insert(entry.get());
          ring_insert(entry.get());
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
  if (!inserted) {
    // Handed out once: the last put() deregisters it.
    entry->state.fetch_or(CacheEntry::kInvalid, std::memory_order_relaxed);
    uncached_.fetch_add(1, std::memory_order_relaxed);
  }
  return entry.release();
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

void RegistrationCache::put(CacheEntry* entry) {
  const uint32_t previous = entry->state.fetch_sub(1, std::memory_order_acq_rel);
  if (previous == (CacheEntry::kInvalid | 1)) finalize(entry);
}

void RegistrationCache::ring_insert(CacheEntry* entry) {
  if (clock_hand_ == nullptr) {
    entry->prev = entry->next = entry;
    clock_hand_ = entry;
    return;
  }
  entry->next = clock_hand_;
  entry->prev = clock_hand_->prev;
  clock_hand_->prev->next = entry;
  clock_hand_->prev = entry;
}

void RegistrationCache::ring_remove(CacheEntry* entry) {
  if (entry->next == entry) {
    clock_hand_ = nullptr;
  } else {
    entry->prev->next = entry->next;
    entry->next->prev = entry->prev;
    if (clock_hand_ == entry) clock_hand_ = entry->next;
  }
  entry->prev = entry->next = nullptr;
}

void RegistrationCache::retire(CacheEntry* entry, CacheEntry*& dead) {
  ring_remove(entry);
  retire_unlinked(entry, dead);
}

void RegistrationCache::retire_unlinked(CacheEntry* entry, CacheEntry*& dead) {
  index_.erase(entry);
  --count_;
  bytes_ -= entry->length;
  // Last touch while a holder may still be out there: once kInvalid is set, that holder's
  // put() may finalize the entry at any moment.
  const uint32_t previous = entry->state.fetch_or(CacheEntry::kInvalid, std::memory_order_acq_rel);
  if ((previous & CacheEntry::kRefMask) == 0) {
    entry->next = dead;
    dead = entry;
  }
}

CacheEntry* RegistrationCache::clock_victim() {
  // Two sweeps at most: the first clears second chances, the second finds one if any is unused.
  for (size_t step = 0; clock_hand_ != nullptr && step < 2 * count_; ++step) {
    CacheEntry* candidate = clock_hand_;
    clock_hand_ = candidate->next;
    if ((candidate->state.load(std::memory_order_acquire) & CacheEntry::kRefMask) != 0) continue;
    if (candidate->referenced.load(std::memory_order_relaxed) != 0) {
      candidate->referenced.store(0, std::memory_order_relaxed);
      continue;
    }
    return candidate;
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
  // Collect first (the index must not change while it is walked), threading the victims
  // through their ring links after taking them out of the ring.
  CacheEntry* victims = nullptr;
  index_.for_each_overlapping(start, end, [&](CacheEntry* entry) {
    if (entry->prev == nullptr) return;  // already collected through another block
    ring_remove(entry);
    entry->next = victims;
    victims = entry;
  });
  while (victims != nullptr) {
    CacheEntry* entry = victims;
    victims = entry->next;
    retire_unlinked(entry, dead);
    invalidations_.fetch_add(1, std::memory_order_relaxed);
  }
  lock_.unlock();
  finalize_all(dead);
}

void RegistrationCache::flush() {
  finalize_deferred();
  CacheEntry* dead = nullptr;
  lock_.lock();
  for (size_t remaining = count_; remaining > 0 && clock_hand_ != nullptr; --remaining) {
    CacheEntry* entry = clock_hand_;
    clock_hand_ = entry->next;
    if ((entry->state.load(std::memory_order_acquire) & CacheEntry::kRefMask) == 0) {
      retire(entry, dead);
    }
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
  CacheEntry* entry = clock_hand_;
  for (size_t i = 0; i < count_; ++i, entry = entry->next) {
    if ((entry->state.load(std::memory_order_acquire) & CacheEntry::kRefMask) != 0) {
      ++stats.in_use_regions;
    }
  }
  lock_.unlock();
  return stats;
}

}  // namespace hmr::core
