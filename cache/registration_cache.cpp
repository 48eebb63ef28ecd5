#include "cache/registration_cache.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <thread>
#include <utility>

#include "cache/deferred_reaper.h"
#include "util/fork_generation.h"

namespace hmr::core {
namespace {
struct PoolDeleter {
  CacheEntryPool* pool;
  void operator()(CacheEntry* entry) const { pool->release(entry); }
};
}  // namespace

RegistrationCache::RegistrationCache(CacheBackend& backend, CacheLimits limits, Monitor* monitor)
    : backend_(backend),
      limits_(limits),
      monitor_(monitor),
      made_in_fork_(forks_counted()) {}

RegistrationCache::~RegistrationCache() {
  detach();  // no notification can run after this, so nothing more gets deferred
  flush();
}

Status RegistrationCache::attach() {
  if (monitor_ == nullptr || attached_) return ok_status();
  HMR_RETURN_IF_ERROR(monitor_->start());
  HMR_RETURN_IF_ERROR(monitor_->add_sink(this));
  if (Status reaper = DeferredReaper::instance().add(this); !reaper.ok()) {
    monitor_->remove_sink(this);
    return reaper;
  }
  attached_ = true;
  validate_hits_ = monitor_->checks_on_hit();
  return ok_status();
}

void RegistrationCache::watch_lost_by_fork() {
  limits_.max_count = 0;  // what find() and get() look at first: no hit, no filing
  monitor_ = nullptr;     // which forgot us: no unsubscription, no removal at detach()
  attached_ = false;
  // A thread of the parent's that was deregistering dead entries when another forked does
  // not exist here, and never counts itself out: nothing may wait for it.  (The C ABI refuses
  // a child its parent's domains, api/bad_handle.h, so only hmr itself may still reach this
  // cache here.)
  finalizing_.store(0, std::memory_order_relaxed);
}

void RegistrationCache::finish_invalidations_later() noexcept {
  // (A cache whose NIC only the application may call keeps them for its next call anyway.)
  DeferredReaper::instance().wake();
}

void RegistrationCache::detach() {
  if (!attached_) return;
  monitor_->remove_sink(this);  // waits for a notification in flight
  DeferredReaper::instance().remove(this);  // and the reaper is done with it too
  attached_ = false;
}

Result<CacheHandle> RegistrationCache::get(uintptr_t start, uint64_t len, const CacheKey& key,
                                           Probe probed, std::optional<uint64_t> since) {
  bool saturated = false;
  const ThreadSlot slot = this_thread_slot();
  if (limits_.max_count != 0 && probed != Probe::absent) {
    wait_for_monitor();
    const Hit hit = lookup(start, len, key, slot);
    if (hit.handle && still_valid(hit)) {
      lookups_.add(slot, kHit, 1);
      return hit.handle;
    }
    saturated = hit.saturated;
  }
  lookups_.add(slot, kMiss, 1);
  finalize_deferred();
  return register_and_insert(start, len, key, /*may_cache=*/!saturated, since);
}

Result<CacheHandle> RegistrationCache::register_and_insert(uintptr_t start, uint64_t len,
                                                           const CacheKey& key, bool may_cache,
                                                           std::optional<uint64_t> since) {
  // Claimed, with our reference; returned to the pool unless it is handed out below.
  std::unique_ptr<CacheEntry, PoolDeleter> entry(pool_.allocate(), PoolDeleter{&pool_});
  entry->start = start;
  entry->length = len;
  entry->key = key;
  entry->level = static_cast<uint8_t>(BlockIndex::level_for(start, len));

  const bool caching = may_cache && limits_.max_count != 0 && BlockIndex::indexable(start, len) &&
                       BlockIndex::fileable(entry.get());
  const uint64_t sequence = since.value_or(invalidation_sequence_.load(std::memory_order_acquire));
  bool subscribed = false;
  if (caching && monitor_ != nullptr) subscribed = monitor_->subscribe(start, len).ok();
  // A range that is changing now (after subscribing: see monitor/changing_ranges.h) may be
  // registered with its old pages: handed out, never filed.
  const bool changing_at_start = subscribed && monitor_->changing(start, start + len);
  Result<nic::Registration> registered = [&] {
    try {
      return backend_.register_range(start, len, key);
    } catch (...) {  // (out of memory in the backend or the NIC): nothing is left watched
      if (subscribed) monitor_->unsubscribe(start, len);
      throw;
    }
  }();
  if (!registered.ok()) {
    if (subscribed) monitor_->unsubscribe(start, len);
    return registered.status();
  }
  if (!entry->set_registration(*registered)) {
    backend_.deregister(*registered, start, len);
    if (subscribed) monitor_->unsubscribe(start, len);
    // As out of memory anywhere: the call ends (a device registration's search must not go on
    // to a host shadow, a copy that would stay cached, for a moment's want of memory).
    throw std::bad_alloc();
  }
  entry->subscribed = subscribed;

  bool inserted = false;
  Retired retired;
  BlockIndex::Table spare;  // a larger index table, allocated with the mutex released
  bool grown = false;       // spare then holds the old table, which readers may still probe
  if (caching && (subscribed || monitor_ == nullptr)) {
    const size_t slots = BlockIndex::slots_needed(*entry);
    const uint32_t tag = KeyTag::of(key);
    for (;;) {
      std::unique_lock<std::mutex> lock(writer_);
      size_t capacity = index_.capacity_for(slots);
      if (capacity != 0 && spare.capacity() >= capacity) {
        spare = index_.adopt(std::move(spare));
        grown = true;
        capacity = 0;
      }
      if (capacity == 0) {
        // Not filed when the range changed since we looked, or was changing then or is now
        // (a registration made meanwhile may be of the old pages); handed out uncached.
        if (!invalidated_since(sequence, start, start + len) && !changing_at_start &&
            (monitor_ == nullptr || !monitor_->changing(start, start + len)) &&
            make_room(len, retired)) {
          // The thread that files an entry is the one likeliest to hit it again: its hits
          // count their references without locked instructions, and without marking the
          // entry held elsewhere (cache_entry.h).
          entry->owner = static_cast<uint8_t>(this_thread_slot().owner_id());
          // Live from here on; the release publishes the fields to readers that find it.
          entry->state.fetch_add(CacheEntry::kLive, std::memory_order_release);
          index_.insert(entry.get(), tag);
          count_.fetch_add(1, std::memory_order_relaxed);
          bytes_ += len;
          inserted = true;
        }
        break;
      }
      lock.unlock();
      // Out of memory for a larger table: the registration is made and valid, so it is handed
      // out uncached rather than lost (the exception left its NIC registration and its
      // subscription behind, and the caller got ENOMEM for a range the NIC held).
      try {
        spare = BlockIndex::make_table(capacity);
      } catch (const std::bad_alloc&) {
        break;
      }
    }
  }
  if (grown) readers_.wait_for_readers();  // then the old table may go
  spare = BlockIndex::Table{};
  finish(retired);
  if (inserted) return CacheHandle::shared(entry.release());
  // Handed out once, never filed: it stays claimed, and the last put() deregisters it.
  uncached_.fetch_add(1, std::memory_order_relaxed);
  return CacheHandle::shared(entry.release());
}

void RegistrationCache::mark_held_elsewhere(const BlockIndex::Slot& slot, uint64_t word,
                                                   CacheEntry& entry) {
  entry.held_elsewhere.store(1, std::memory_order_relaxed);
  // The flag before the slot's second look: a retirer stores the slot, fences, and reads the
  // flag (retire()), so one of us sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A hint only: a lost race costs the next hit this function again.
  BlockIndex::try_rewrite(slot, word, word | BlockIndex::kHeldHintBit);
}

bool RegistrationCache::keep_while_counted(CacheEntry& entry,
                                           uint64_t (&marks)[kThreadSlots],
                                           CacheEntry*& dead) {
  uint64_t counting = 0;
  const uint32_t counted = entry.thread_counts(&counting);
  const uint32_t seen = entry.state.load(std::memory_order_acquire);
  if (counted != 0 && CacheEntry::references(seen, counted) - 1 != 0) {
    add_marks(marks, counting, held_mark(entry));
    return true;
  }
  // Nobody else, or only shared references, whose last drop decides (none can be taken any
  // more: the entry is out of the index).
  const uint32_t left = entry.state.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if (CacheEntry::unreferenced(left, counted) && claim(entry, left)) {
    entry.next = dead;
    dead = &entry;
  }
  return false;
}

bool RegistrationCache::drop_shared(CacheEntry& entry, bool& sweep) {
  const uint32_t seen = entry.state.fetch_sub(1, std::memory_order_acq_rel) - 1;
  bool still_held = false;
  if (claim_if_last(entry, seen, still_held)) return true;
  // Referenced still, maybe only by the held list, whose entries wait for counts that may be
  // debts nobody will take back: the list must look again.
  sweep = still_held && held_listed_.load(std::memory_order_relaxed);
  return false;
}

bool RegistrationCache::claim_if_last(CacheEntry& entry, uint32_t seen, bool& still_held) {
  // Live, free, or other shared references left: nothing to decide (and no fence to pay).
  if ((seen & (CacheEntry::kLive | CacheEntry::kClaimed)) != CacheEntry::kClaimed ||
      (seen & CacheEntry::kRefMask) > CacheEntry::kZero) {
    return false;
  }
  // Never counted in a thread's table (an uncached registration, or one filed by a thread
  // without a table of its own and never held elsewhere): state says it all.  A thread that
  // marks it held elsewhere now would find it out of the index (retire() fences against that).
  if (entry.owner == 0 && entry.held_elsewhere.load(std::memory_order_acquire) == 0) {
    return CacheEntry::unreferenced(seen, 0) && claim(entry, seen);
  }
  // Threads store their counts behind a compiler barrier only: after this fence we see every
  // count each stored before it last looked at the slot or state, and it sees the entry gone.
  heavy_fence();
  if (CacheEntry::unreferenced(seen, entry.thread_counts())) return claim(entry, seen);
  still_held = true;
  return false;
}

void RegistrationCache::put_shared(CacheEntry& entry, ThreadSlot slot) {
  bool sweep = false;
  const bool last = drop_shared(entry, sweep);
  readers_.leave(slot);
  if (last) finalize(&entry);
  if (sweep) sweep_held();
}

void RegistrationCache::refuse_shared(CacheEntry& entry, bool saturated, Hit& hit) {
  hit.saturated = hit.saturated || saturated;
  bool sweep = false;
  const bool last = drop_shared(entry, sweep);
  hit.sweep = hit.sweep || sweep;
  if (last) {  // we held a dead entry's last reference
    entry.next = hit.orphans;
    hit.orphans = &entry;
  }
}

void RegistrationCache::refuse_counted(CacheEntry& entry, unsigned thread_id, bool saturated,
                                       Hit& hit) {
  hit.saturated = hit.saturated || saturated;
  undo_stale_count(entry, thread_id, hit);
}

void RegistrationCache::undo_stale_count(CacheEntry& entry, unsigned thread_id, Hit& hit) {
  bool sweep = false;
  (void)uncount(entry, thread_id, sweep);  // just counted: it is there
  hit.sweep = hit.sweep || sweep;
  // Our count down (uncount's light fence), then state: a dropper stores state, runs a heavy
  // fence and reads our count (drop_shared), so one of us sees the other.
  bool still_held = false;
  if (claim_if_last(entry, entry.state.load(std::memory_order_acquire), still_held)) {
    entry.next = hit.orphans;
    hit.orphans = &entry;
  }
}

void RegistrationCache::repay_debt(CacheEntry& entry, unsigned thread_id) {
  const std::lock_guard<std::mutex> lock(writer_);
  const uint32_t seen = entry.state.load(std::memory_order_acquire);
  // Retired meanwhile: its debt is settled with it (the sum is what counts).
  if ((seen & CacheEntry::kLive) == 0 || (seen & CacheEntry::kRefMask) >= CacheEntry::kZero) {
    return;
  }
  // At most the debt (state's count is kZero + shared - debt, and shared >= 0) and at most our
  // count.  The add first, then our count down: a reader of both may see too many, never too
  // few.
  const uint32_t mine = OwnerCounts::of(thread_id, &entry);
  const uint32_t repaid = std::min(CacheEntry::kZero - (seen & CacheEntry::kRefMask), mine);
  entry.state.fetch_add(repaid, std::memory_order_acq_rel);
  (void)OwnerCounts::set(thread_id, &entry, mine - repaid);
}

void RegistrationCache::put_and_drop_if_unused(const CacheHandle& handle) {
  CacheEntry* entry = handle.entry;
  Retired retired;
  {
    const std::lock_guard<std::mutex> lock(writer_);
    // Ours keeps the entry alive.  A hit racing us may still take a reference before it
    // leaves the index; that hit came first, and the entry stays valid for it.
    const uint32_t seen = entry->state.load(std::memory_order_acquire);
    // Another thread's count is exact only after a heavy fence (rare path: a rereg).
    heavy_fence();
    const uint32_t owned = entry->thread_counts();
    if ((seen & CacheEntry::kLive) != 0 && CacheEntry::references(seen, owned) == 1) {
      retire(entry, retired);
    }
  }
  finish(retired);
  put(handle);  // the last reference of a retired entry deregisters it
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

bool RegistrationCache::still_valid_slow(const Hit& hit) {
  if (monitor_->valid(hit.entry_start, hit.entry_end - hit.entry_start)) return true;
  invalidate(hit.entry_start, hit.entry_end);  // the monitor says it changed: drop it
  put(hit.handle);
  return false;
}

void RegistrationCache::retire(CacheEntry* entry, Retired& retired) {
  index_.erase(entry);
  count_.fetch_sub(1, std::memory_order_relaxed);
  bytes_ -= entry->length;
  // Last touch while a holder may still be out there: from now on whoever drops the last
  // reference finalizes the entry, at any moment.  A reader that read its slot before the
  // erase may still count a reference, but sees the slot changed (or the entry not live) and
  // takes it back.
  // The erase before the look at held_elsewhere: a thread marks it before its second look at
  // the slot (mark_held_elsewhere), so either it sees the erase or we see the mark.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Counted by nobody but its owner, and we are the owner or there is none (memhooks
  // invalidates on the unmapping thread, usually the one that registered; evictions run on
  // the missing thread): the counts are known exactly here, and are 0.
  // Held by us, it goes onto the held list like any counted entry (finish()), for our own
  // put() to find.
  if (entry->held_elsewhere.load(std::memory_order_relaxed) == 0 &&
      (entry->owner == 0 || entry->owner == this_thread_slot().owner_id()) &&
      OwnerCounts::of(entry->owner, entry) == 0) {
    // In a section: once live is cleared another thread may finalize it, and the pool must not
    // recycle it before our compare-exchange has looked (an identical state in its next life).
    const ReadSection section(readers_);
    const uint32_t seen =
        entry->state.fetch_and(~CacheEntry::kLive, std::memory_order_acq_rel) & ~CacheEntry::kLive;
    if (CacheEntry::unreferenced(seen, 0) && claim(*entry, seen)) {
      entry->next = retired.dead;
      retired.dead = entry;
    }
    return;
  }
  // Counted by other threads, without fences: whether they still hold it can be read only
  // after a heavy fence, one for all the entries this writer retires (finish()).  Until then
  // a shared reference of ours, taken with the same instruction, keeps anyone else from
  // finalizing it.
  // In transit until settle() decides (a claim there counts it again first).
  in_transit_.fetch_add(1, std::memory_order_relaxed);
  entry->state.fetch_sub(CacheEntry::kLive - 1, std::memory_order_acq_rel);
  entry->next = retired.unsettled;
  retired.unsettled = entry;
}

void RegistrationCache::finish(Retired& retired) {
  if (retired.unsettled != nullptr) settle(retired);
  finalize_all(retired.dead);
  retired.dead = nullptr;
}

void RegistrationCache::settle(Retired& retired) {
  CacheEntry* listed = nullptr;
  uint64_t listed_count = 0;
  uint64_t marks[kThreadSlots] = {};
  {
    // Until our references are dropped below, nobody else finalizes these, so their `next` is
    // ours; after that only the section keeps them from being recycled while we decide.
    const ReadSection section(readers_);
    heavy_fence();  // every thread's count before it last looked, or it sees the entry gone
    for (CacheEntry* entry = retired.unsettled; entry != nullptr;) {
      CacheEntry* next = entry->next;
      if (keep_while_counted(*entry, marks, retired.dead)) {  // onto the held list
        entry->next = listed;
        listed = entry;
        ++listed_count;
      } else {
        // retire()'s count, decided: claimed (and counted again by claim()) or left to its
        // holders.
        in_transit_.fetch_sub(1, std::memory_order_release);
      }
      entry = next;
    }
    retired.unsettled = nullptr;
  }
  if (listed == nullptr) return;
  hold(listed, marks);
  // Counted until the list's first sweep has looked: a holder that let go after our fence but
  // before its mark was set did not sweep, and left the entry to that sweep, which claims it
  // (counting it again) before this.
  in_transit_.fetch_sub(listed_count, std::memory_order_release);
}

void RegistrationCache::hold(CacheEntry* listed, const uint64_t (&marks)[kThreadSlots]) {
  {
    const std::lock_guard<std::mutex> lock(held_mutex_);
    CacheEntry* last = listed;
    while (last->next != nullptr) last = last->next;
    last->next = held_;
    held_ = listed;
    held_listed_.store(true, std::memory_order_relaxed);
    for (unsigned i = 0; i < kThreadSlots; ++i) {
      if (marks[i] != 0) held_marks_[i].fetch_or(marks[i], std::memory_order_relaxed);
    }
  }
  // A thread that let go before it could see its mark is seen letting go by the sweep's
  // heavy fence.
  sweep_held();
}

void RegistrationCache::sweep_held() {
  CacheEntry* dead = nullptr;
  {
    const std::lock_guard<std::mutex> lock(held_mutex_);
    // Once our reference is dropped another holder may finalize an entry: the section keeps
    // the pool from recycling it before our compare-exchange has looked.
    const ReadSection section(readers_);
    for (;;) {
      // The marks (stored before) against each thread's count: a thread stores its count,
      // then reads its marks (uncount()); after this fence we see its count or it sees its
      // mark.
      heavy_fence();
      uint64_t marks[kThreadSlots] = {};
      for (CacheEntry** link = &held_; *link != nullptr;) {
        CacheEntry* entry = *link;
        CacheEntry* const after = entry->next;  // before keep_while_counted() may reuse it
        if (keep_while_counted(*entry, marks, dead)) {
          link = &entry->next;
        } else {
          *link = after;
        }
      }
      held_listed_.store(held_ != nullptr, std::memory_order_relaxed);
      // A thread counting now that was not marked before (a hit taking back a count it took
      // on a slot the erase had not reached yet) may have looked at its marks already: mark
      // it, and look once more after another fence.
      bool marked_anew = false;
      for (unsigned i = 0; i < kThreadSlots; ++i) {
        const uint64_t before = held_marks_[i].load(std::memory_order_relaxed);
        marked_anew = marked_anew || (marks[i] & ~before) != 0;
        if (before != marks[i]) held_marks_[i].store(marks[i], std::memory_order_relaxed);
      }
      if (!marked_anew) break;
    }
  }
  finalize_all(dead);
}

void RegistrationCache::add_marks(uint64_t (&marks)[kThreadSlots], uint64_t threads,
                                  uint64_t mark) {
  for (unsigned i = 0; i < kThreadSlots; ++i) {
    if ((threads >> i & 1) != 0) marks[i] |= mark;
  }
}

CacheEntry* RegistrationCache::clock_victim(const VictimFilter* wanted) {
  // The hand judges an entry at its first slot.  Three passes at most: two bring any
  // recency to 0, the third finds an unused entry if there is one.  Hits on other threads
  // (lock-free) can mark an unused entry again between the hand's visits: then the first
  // unused one the hand met is the victim all the same (it went on failing as if every entry
  // were in use, with one idle: found by a review).
  const size_t capacity = index_.capacity();
  CacheEntry* kept_recent = nullptr;
  for (size_t step = 0; step < 3 * capacity; ++step) {
    if (clock_hand_ >= capacity) clock_hand_ = 0;
    BlockIndex::Slot& first = index_.slot_at(clock_hand_++);
    if (first.empty() || first.delta() != 0) continue;
    CacheEntry* entry = first.entry();
    if (entry->references() != 0) continue;
    if (wanted != nullptr && !(*wanted)(*entry)) continue;
    if (!index_.take_recency(first)) return entry;  // no recency left
    if (kept_recent == nullptr) kept_recent = entry;
  }
  // (Still in the index: only a writer, under writer_, takes entries out.  In use again
  // meanwhile, it is not idle after all.)
  return kept_recent != nullptr && kept_recent->references() == 0 ? kept_recent : nullptr;
}

bool RegistrationCache::make_room(uint64_t bytes, Retired& retired) {
  if (limits_.max_bytes != 0 && bytes > limits_.max_bytes) return false;  // never fits: evict nothing
  while (count_.load(std::memory_order_relaxed) + 1 > limits_.max_count ||
         (limits_.max_bytes != 0 && bytes_ + bytes > limits_.max_bytes)) {
    CacheEntry* victim = clock_victim();
    if (victim == nullptr) return false;  // everything is in use: hand this one out uncached
    retire(victim, retired);
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void RegistrationCache::invalidate(uintptr_t start, uintptr_t end) {
  Retired retired;
  std::unique_lock<std::mutex> lock(writer_);
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
    retire(entry, retired);
    invalidations_.fetch_add(1, std::memory_order_relaxed);
  }
  lock.unlock();
  finish(retired);
}

void RegistrationCache::flush() {
  // Invalidations already read by the monitor's thread are finished first, and what they left
  // to deregister is deregistered here, or by the reaper thread that took it first, which is
  // waited for: after a flush nothing unused is registered (CallbackNic.AFlushWaitsFor...).
  wait_for_monitor();
  finalize_deferred();
  wait_for_finalizing();  // (before writer_: a dereg that unmaps needs invalidate(), which takes it)
  sweep_held();
  Retired retired;
  std::unique_lock<std::mutex> lock(writer_);
  CacheEntry* unused = nullptr;
  for (size_t i = 0; i < index_.capacity(); ++i) {
    BlockIndex::Slot& first = index_.slot_at(i);
    if (first.empty() || first.delta() != 0 || first.entry()->references() != 0) continue;
    first.entry()->next = unused;
    unused = first.entry();
  }
  while (unused != nullptr) {
    CacheEntry* entry = unused;
    unused = entry->next;
    retire(entry, retired);
  }
  lock.unlock();
  finish(retired);
}

namespace {
// The caches whose entries this thread is deregistering, innermost first (a callback NIC's
// dereg may call hmr back, and close or flush another domain): it must not wait for a
// cache's deregistrations to end where its own are among them, and must wait for another
// cache's (another thread may be in that cache's NIC, which its close is about to close).
struct FinalizingFrame {
  const RegistrationCache* cache;
  const FinalizingFrame* outer;
};
thread_local const FinalizingFrame* finalizing_here = nullptr;

bool finalizing_on_this_thread(const RegistrationCache* cache) {
  for (const FinalizingFrame* frame = finalizing_here; frame != nullptr; frame = frame->outer) {
    if (frame->cache == cache) return true;
  }
  return false;
}
}  // namespace

bool RegistrationCache::deregistering_on_this_thread() const {
  return finalizing_on_this_thread(this);
}

void RegistrationCache::finalize(CacheEntry* entry) {
  if (entry->subscribed && monitor_ != nullptr) monitor_->unsubscribe(entry->start, entry->length);
  nic::Registration registration = entry->registration();
  const FinalizingFrame frame{this, finalizing_here};
  finalizing_here = &frame;
  nic_deregistrations_.fetch_add(1, std::memory_order_relaxed);
  backend_.deregister(registration, entry->start, entry->length);
  nic_deregistrations_.fetch_sub(1, std::memory_order_release);
  finalizing_here = frame.outer;
  // After the NIC let go: in transit until then (claim()).
  finalized_.fetch_add(1, std::memory_order_release);
  in_transit_.fetch_sub(1, std::memory_order_release);
  entry->drop_long_record();
  pool_.release(entry);
}

size_t RegistrationCache::finalize_all(CacheEntry* dead) {
  const bool event_thread = Monitor::on_event_thread();
  if (dead != nullptr && (event_thread || Monitor::deferring_to_caller())) {
    CacheEntry* tail = dead;
    while (tail->next != nullptr) tail = tail->next;
    tail->next = deferred_.load(std::memory_order_relaxed);
    while (!deferred_.compare_exchange_weak(tail->next, dead, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
    // An event thread's are deregistered by the reaper's thread, not at our next call; a
    // notifying application thread does its own once it released the monitor's lock
    // (finish_invalidations()).
    if (event_thread) DeferredReaper::instance().wake();
    return 0;
  }
  size_t finalized = 0;
  const uint32_t forks = forks_counted();
  while (dead != nullptr) {
    // A NIC callback forked: the child deregisters nothing of its parent's (its copy of the
    // NIC's state is not the parent's NIC).
    if (forks_counted() != forks) break;
    CacheEntry* next = dead->next;
    finalize(dead);
    ++finalized;
    dead = next;
  }
  return finalized;
}

size_t RegistrationCache::finalize_deferred() {
  // Acquire: a null left by another thread's exchange makes its finalizing_ count visible.
  if (deferred_.load(std::memory_order_acquire) == nullptr) return 0;
  finalizing_.fetch_add(1, std::memory_order_acq_rel);  // before the list is taken
  // (finalize() marks this thread as deregistering around each NIC call.)
  const size_t finalized = finalize_all(deferred_.exchange(nullptr, std::memory_order_acq_rel));
  finalizing_.fetch_sub(1, std::memory_order_release);
  return finalized;
}

void RegistrationCache::wait_for_finalizing() const {
  // Another thread (hmr's deferred reaper, or a caller) took the dead entries and is
  // deregistering them: what it releases counts as released once it is done.
  if (finalizing_on_this_thread(this)) return;
  while (finalizing_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

size_t RegistrationCache::release_unused(size_t count, const VictimFilter* wanted,
                                         bool then_wait_for_others) {
  // What memory that went away left registered goes first: it helps nobody.
  wait_for_monitor();
  const size_t deferred = finalize_deferred();
  // (A filtered call counts only what it chose, those being of any kind, but in its last pass.)
  const bool count_others = wanted == nullptr || then_wait_for_others;
  size_t released = count_others ? deferred : 0;
  // Dead entries another thread took (hmr's reaper) are not waited for here, before the idle
  // ones: that thread is inside the NIC's dereg, which may be slow, or (a callback NIC's) wait
  // for a lock the caller holds while it registers, and the caller then waited for ever with
  // idle entries to give.  They count as in transit: when nothing idle is left,
  // wait_for_in_transit below waits for them, bounded.
  sweep_held();
  if (released >= count) return released;
  Retired retired;
  {
    const std::lock_guard<std::mutex> lock(writer_);
    for (; released < count; ++released) {
      CacheEntry* victim = clock_victim(wanted);
      if (victim == nullptr) break;  // every entry (`wanted`) is in use
      retire(victim, retired);
      pressure_evictions_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Deregistered here, with the mutex released; an entry a thread still counts stays
  // registered until that thread's put() (it was not idle after all) but leaves the cache.
  finish(retired);
  if (released != 0 || finalizing_here != nullptr || !count_others) return released;
  // Nothing idle is left here, but what another thread let go may be on its way out (dead
  // entries the reaper is deregistering; a flush, an invalidation or an eviction between
  // retire() and finish(); the put() that dropped the last reference of an entry retired
  // under it): those give their resources back without the application, so the caller's
  // retry can succeed once they did.  An entry an open MR keeps is not among them: only its
  // close lets it go.  Not from inside a deregistration of any cache (a registration a dereg
  // callback makes, above): the other thread may be inside a dereg callback itself,
  // registering in a cache this thread is finalizing, and each would wait for the other
  // (docs/semantics.md: such a registration never waits for a giving back).
  return wait_for_in_transit();
}

size_t RegistrationCache::wait_for_in_transit() {
  const uint64_t finalized = finalized_.load(std::memory_order_acquire);
  // A hit that took back a stale count of a held entry leaves it to the list alone until its
  // own sweep, a moment later (lookup()): this sweep may claim it first.
  if (held_listed_.load(std::memory_order_relaxed)) sweep_held();
  const uint64_t in_transit = in_transit_.load(std::memory_order_acquire);
  if (in_transit == 0) {
    return static_cast<size_t>(finalized_.load(std::memory_order_acquire) - finalized);
  }
  // Until as many entries were deregistered as were in transit (by anyone: new ones may keep
  // the account above 0), or none is left.  Each is deregistered, or handed to its holders, by
  // a thread that needs nothing from us.  While one is inside a NIC's deregistration that
  // needs nothing from the application either, the wait has no bound: that call ends by
  // itself, however long it takes (a verbs dereg of hundreds of GiB unpins for seconds; the
  // bound below used to end the wait first, and the caller was refused with the resources on
  // their way back).  Otherwise the bound without progress (2^20 rounds, or 250 ms: a round
  // of yield takes far longer while other threads spin, and a registration waited 20 s so on
  // a loaded machine) is a safety net, not a timing rule: a callback NIC's dereg may wait for
  // a lock the caller holds while it registers (a refusal then, rather than a deadlock; the
  // registrar then does not wait for the giving back that dereg is inside either:
  // NicRegistrar::give_back), and a process forked while an entry
  // was in transit never sees it end (the thread that claimed it is not there), though a
  // forked child cannot reach its parent's caches through the C ABI (api/bad_handle.h).
  const bool ends_by_itself =
      !backend_.deregistration_may_wait_for_application() && forks_counted() == made_in_fork_;
  uint64_t seen = finalized;
  auto progress_at = std::chrono::steady_clock::now();
  for (unsigned idle_rounds = 0; idle_rounds < rounds_without_progress_; ++idle_rounds) {
    rounds_waited_.fetch_add(1, std::memory_order_relaxed);
    (void)finalize_deferred();  // (what a monitor's thread left, if the reaper is behind)
    const uint64_t now = finalized_.load(std::memory_order_acquire);
    if (now - finalized >= in_transit || in_transit_.load(std::memory_order_acquire) == 0) {
      return static_cast<size_t>(now - finalized);
    }
    if (now != seen) {
      seen = now;
      idle_rounds = 0;
      progress_at = std::chrono::steady_clock::now();
    } else if (ends_by_itself && nic_deregistrations_.load(std::memory_order_acquire) != 0) {
      idle_rounds = 0;  // a NIC call under way: progress to come, without anyone's help
      progress_at = std::chrono::steady_clock::now();
    } else if (idle_rounds % 1024 == 1023 &&
               std::chrono::steady_clock::now() - progress_at > kMostWithoutProgress) {
      break;
    }
    std::this_thread::yield();
  }
  return static_cast<size_t>(seen - finalized);
}

CacheStatistics RegistrationCache::statistics() {
  // An unmap whose event the monitor has read but not yet delivered (munmap() has returned)
  // is counted first, as a lookup would see it gone: statistics taken after munmap() returns
  // include its invalidation (they did not, now and then, on a loaded machine).
  wait_for_monitor();
  finalize_deferred();
  wait_for_finalizing();  // so the counts include dead entries another thread is releasing
  CacheStatistics stats;
  stats.hits = static_cast<uint64_t>(lookups_.sum(kHit));
  stats.misses = static_cast<uint64_t>(lookups_.sum(kMiss));
  stats.invalidations = invalidations_.load(std::memory_order_relaxed);
  stats.evictions = evictions_.load(std::memory_order_relaxed);
  stats.pressure_evictions = pressure_evictions_.load(std::memory_order_relaxed);
  stats.uncached = uncached_.load(std::memory_order_relaxed);
  // The walk is O(slots) (milliseconds at a million entries) and holds the writer mutex:
  // entries cannot leave the index meanwhile.  Hits take no lock and go on; only inserts and
  // invalidations wait for it.
  const std::lock_guard<std::mutex> lock(writer_);
  stats.cached_regions = count_.load(std::memory_order_relaxed);
  stats.cached_bytes = bytes_;
  for (size_t i = 0; i < index_.capacity(); ++i) {
    BlockIndex::Slot& first = index_.slot_at(i);
    if (!first.empty() && first.delta() == 0 && first.entry()->references() != 0) {
      ++stats.in_use_regions;
    }
  }
  return stats;
}

}  // namespace hmr::core
