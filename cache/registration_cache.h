// core::RegistrationCache — per-domain cache of NIC registrations.
//
// get() finds an entry whose range contains the request and whose CacheKey matches (a hit:
// one hash probe per populated index level, a reference count, no allocation, no lock), or
// registers on a miss: the NIC call runs with no lock held, then the entry is inserted under
// the writer mutex if no invalidation touched its range meanwhile.
// A hit takes no lock at all: it enters a read section (util/read_sections.h: a plain store
// to the thread's own slot) and probes the index beside any writer.  On a slot that serves
// hits alone (cache/block_index.h) it checks range and key in the slot, counts a reference in
// its own thread's table (cache/owner_counts.h: plain stores), and then reads the slot's word
// and the published table again: unchanged, the entry was still filed when the count became
// visible, and any retirer reads that count after its heavy fence (Dekker's pattern,
// util/asymmetric_fence.h).  Such a hit and its put() never touch the entry.  On other slots
// it counts a reference first (the filing thread in its table, others in the entry's state
// with one locked add) and then trusts the entry's range and key.  Entries are recycled only
// after a grace period (cache/entry_pool.h).  Writers (insert, invalidate, evict) take the
// writer mutex and never wait for readers, except that a grown index table is freed only
// after a grace period, and that deciding whether threads still hold entries it retired
// costs one heavy fence per batch of retired entries.  An entry retired while threads count
// references to it waits on the held list, and each such thread's put() of it looks at the
// list (its held marks say so: sweep_held).
// Entries die when the monitor reports their range changed; one still in use stays valid
// for its holders and is deregistered by the last put().  Unused entries are evicted by
// CLOCK (a hand sweeping the slot table) when the count or byte limit is reached.
// Deregistration always happens after the writer mutex is released (a dead list through the
// entries).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <mutex>

#include "cache/block_index.h"
#include "cache/cache_entry.h"
#include "cache/cache_handle.h"
#include "cache/entry_pool.h"
#include "monitor/monitor.h"
#include "util/asymmetric_fence.h"
#include "util/sharded_counters.h"
#include "util/read_sections.h"
#include "util/status.h"

namespace hmr::core {

// The registration the cache stands in front of.
class CacheBackend {
 public:
  virtual Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                                   const CacheKey& key) = 0;
  // `registration` as the entry kept it, for the range register_range was given (an entry
  // keeps only what it must: a backend rebuilds the rest, such as the bytes it pins).  Never
  // throws: it runs on hmr's reaper thread and in the cache's destructor, and the cache's
  // books (finalizing, in transit) are kept around it.
  virtual void deregister(nic::Registration& registration, uintptr_t start,
                          uint64_t len) noexcept = 0;
  // Whether a deregistration may wait for the application (a callback NIC's code may take a
  // lock the application holds while it registers): a refusal under pressure then waits for
  // another thread's deregistration only for a while.  One that needs nothing from the
  // application (a kernel's or libfabric's dereg, however slow for a large region) is waited
  // for until it ends (RegistrationCache::wait_for_in_transit).
  virtual bool deregistration_may_wait_for_application() const { return true; }

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
  uint64_t pressure_evictions = 0;  // unused entries dropped because the NIC refused one
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
  // Monitor::notify's second half on an application's thread: what invalidate() deferred.
  bool has_deferred() const override {
    return !application_calls_only_ && deferred_.load(std::memory_order_acquire) != nullptr;
  }
  // (And waits for deregistrations the reaper took first: the caller's invalidation returns
  // only when the NIC let go of what it dropped.)
  void finish_invalidations() override {
    finalize_deferred();
    wait_for_finalizing();
  }
  void finish_invalidations_later() noexcept override;

  // What a caller already knows of [start, start+len) when it calls get() after find() in the
  // same request.  `absent`: find() met no entry that could serve it (none, or only dead ones
  // or other ranges), so get() registers at once instead of probing the index a second time.
  // An entry filed by another thread in between is then not found; the two registrations
  // both stay valid, as when two threads miss at once (the probe in get() narrowed that window,
  // it never closed it).  A saturated entry is not `absent`: get() must look to learn that.
  enum class Probe : uint8_t { not_done, absent };
  // A reference to an entry containing [start, start+len); release it with put().
  // A registration it makes is not filed when the range was invalidated meanwhile: since the
  // call, or since `since`, an invalidation_sequence() the caller read earlier, when what it
  // did before (learning that the memory is what it is) must count too.
  Result<CacheHandle> get(uintptr_t start, uint64_t len, const CacheKey& key,
                          Probe probed = Probe::not_done,
                          std::optional<uint64_t> since = std::nullopt);
  // How many invalidations the cache has had: for get()'s `since`.
  uint64_t invalidation_sequence() const {
    return invalidation_sequence_.load(std::memory_order_acquire);
  }
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
  // Deregisters now what invalidations left to deregister (the reaper's work, done by the
  // caller: under pressure, before any cache gives back entries still wanted).  How many.
  size_t release_dead() { return finalize_deferred(); }
  // Under NIC pressure (registration/nic_pressure.h): deregisters what invalidations left
  // to deregister, then drops up to `count` unused entries, least recently used first (the
  // CLOCK hand of the limits).  How many it dropped or deregistered; 0: nothing idle is left.
  size_t release_unused(size_t count) { return release_unused(count, nullptr); }
  // The same, dropping only unused entries that `wanted` says giving back helps (a want the
  // NIC's refusal does not name: registration/nic_pressure.h), in CLOCK order among them; the
  // hand passes the others by and leaves their recency as it was.  How many of those it
  // dropped: what invalidations left is deregistered first as always, but not counted, and
  // what others have in transit not waited for (it may be of any kind), unless
  // `then_wait_for_others` (the caller's last pass: what others let go may be what it needs,
  // and counts as given back, as in release_unused(count)).  `wanted` is called under the
  // cache's writer lock, for each unused entry the hand meets: it must be cheap and must not
  // call back into the cache.
  using VictimFilter = std::function<bool(const CacheEntry&)>;
  size_t release_unused(size_t count, const VictimFilter* wanted,
                        bool then_wait_for_others = false);
  // Deregisters what monitor events left dead (DeferredReaper's thread calls it).
  // Whether this thread is inside the NIC's deregistration of one of this cache's entries (a
  // callback NIC's dereg calling hmr back): the cache must not be destroyed under it.
  bool deregistering_on_this_thread() const;
  void reap_deferred() {
    if (!application_calls_only_) (void)finalize_deferred();
  }
  // Its NIC may be called only inside the application's own calls on the domain
  // (nic::Capabilities::serialized_by_application): dead entries then wait for the domain's
  // next miss, flush, release under pressure or close, never for hmr's reaper thread or
  // another thread's invalidation.  Set before the cache is shared.
  void deregister_in_application_calls_only() { application_calls_only_ = true; }
  CacheStatistics statistics();
  // Nothing is filed (a hint, read without the writer mutex: an entry may be filed or leave
  // at any moment).  The device hit path asks it before it asks a runtime anything.
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  const CacheLimits& limits() const { return limits_; }

 private:
  friend class RegistrationCacheTestPeer;  // white-box tests (index slots)

  struct Hit {
    CacheHandle handle;
    uintptr_t entry_start = 0;  // the entry's range, for a monitor that validates hits
    uintptr_t entry_end = 0;
    bool saturated = false;  // found, but the entry already carries CacheEntry::kMaxRefs
    bool in_debt = false;    // the thread's count reached kMaxDebt with a debt in state
    bool sweep = false;      // a count taken back met this thread's held mark for it
    bool retry = false;      // a served slot moved or the table grew under the probe
    CacheEntry* orphans = nullptr;  // dead entries whose last reference the probe dropped
  };
  // What a slot that serves hits alone says of a request.
  enum class Served : uint8_t { taken, not_this, ask_entry };
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
  // What retire() leaves for after the writer mutex: entries to finalize, and entries other
  // threads may count, whose counts can be read only after a heavy fence (finish()).  Both lists run
  // through `next`; an unsettled entry carries a shared reference of ours, so nobody else
  // finalizes it (and rewrites its `next`) before finish() drops it.
  struct Retired {
    CacheEntry* dead = nullptr;
    CacheEntry* unsettled = nullptr;
  };
  // `may_cache` false: register and hand out uncached (a saturated slot).
  Result<CacheHandle> register_and_insert(uintptr_t start, uint64_t len, const CacheKey& key,
                                          bool may_cache, std::optional<uint64_t> since);
  bool invalidated_since(uint64_t sequence, uintptr_t start, uintptr_t end) const;
  bool make_room(uint64_t bytes, Retired& retired);
  CacheEntry* clock_victim(const VictimFilter* wanted = nullptr);
  // A hit served by `slot` (read as `word` and `meta` in `table`) for thread `thread_id`,
  // whose request's key has the slot's exact tag `exact`: a reference counted in the thread's
  // own table, kept only if the slot still files the entry once the count is visible.  Fills
  // hit.handle when taken.  ask_entry when the thread's table cannot count it.
  [[gnu::always_inline]] Served take_served(const BlockIndex::Slot& slot, uint64_t word,
                                            uint64_t meta, const BlockIndex::Slot* table,
                                            uintptr_t start, uint64_t len, uint32_t exact,
                                            unsigned thread_id, Hit& hit);
  // A thread other than the owner is about to count references to `entry` in its own table:
  // the entry says so (retirers then read every thread's table), and the slot's hint saves
  // the next hit from asking again.  Before the count's check of the slot: see retire().
  [[gnu::cold, gnu::noinline]] static void mark_held_elsewhere(const BlockIndex::Slot& slot,
                                                               uint64_t word, CacheEntry& entry);
  // A reference on a candidate the index showed us, kept only if the entry is live, below
  // CacheEntry::kMaxRefs and matches the request; otherwise given back at once (onto
  // hit.orphans if that was a dead entry's last reference).  Counted in the calling thread's
  // table (`thread_id`, 0 for none) when it filed the entry, a shared one otherwise.
  [[gnu::always_inline]] bool take_if_match(CacheEntry& entry, uintptr_t start, uint64_t len,
                                            const CacheKey& key, unsigned thread_id, Hit& hit);
  // Refusals, off the hit path: the reference taken back (a shared one, or one counted in
  // `thread_id`'s table), the entry finalized through hit.orphans if that was a dead entry's
  // last reference, hit.saturated set when `saturated`.
  [[gnu::cold, gnu::noinline]] void refuse_shared(CacheEntry& entry, bool saturated, Hit& hit);
  [[gnu::cold, gnu::noinline]] void refuse_counted(CacheEntry& entry, unsigned thread_id,
                                                   bool saturated, Hit& hit);
  // Takes back a count `thread_id` took on a look that turned out stale (the slot moved or
  // the entry left the index), in a read section.  While it was visible, the thread dropping
  // the entry's last other reference may have seen it and left the decision to whoever lets
  // go next (cache_entry.h): that is us, so if the entry is out of the index and nobody else
  // holds it, we finalize it (onto hit.orphans).  hit.sweep when our held mark says so.
  [[gnu::cold, gnu::noinline]] void undo_stale_count(CacheEntry& entry, unsigned thread_id,
                                                     Hit& hit);
  // A reference dropped, in a read section: true when it was the last of an entry out of the
  // index and this caller won its finalization.  A shared one (or one counted in a thread's
  // table, closed on another thread or repaid) is given back in state, below kZero if need be.
  // `sweep`: the entry is still referenced and the held list is not empty; the caller runs
  // sweep_held() once out of its section (the list may hold it for a debt nobody repays).
  bool drop_shared(CacheEntry& entry, bool& sweep);
  // The decision after a reference of an entry was dropped (or a thread's count taken back),
  // with `seen` its state after that: true when the entry is out of the index, nobody
  // references it, and this caller won its finalization.  `still_held` when it is out of the
  // index, with no shared reference left, and threads' counts or a held list still hold it.
  bool claim_if_last(CacheEntry& entry, uint32_t seen, bool& still_held);
  // CacheEntry::claim_finalization(seen), and a won claim counted in transit until finalize().
  bool claim(CacheEntry& entry, uint32_t seen) {
    if (!entry.claim_finalization(seen)) return false;
    in_transit_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // A retired entry carrying a reference of ours (unsettled, or on the held list), after a
  // heavy fence: kept, with its holders' marks added to `marks`, while threads count it and
  // something besides us holds it; otherwise our reference is dropped, and the entry goes
  // onto `dead` (through next) if that was its last.
  bool keep_while_counted(CacheEntry& entry, uint64_t (&marks)[kThreadSlots],
                          CacheEntry*& dead);
  // Thread `thread_id` takes one off its own count of `entry`, which it holds: whether the
  // count was there (else the caller drops a shared one) and, in `sweep`, whether its held
  // marks then say that a retirer may have listed this entry while it counted it
  // (sweep_held()).
  [[gnu::always_inline]] bool uncount(CacheEntry& entry, unsigned thread_id, bool& sweep) {
    if (!OwnerCounts::remove(thread_id, &entry)) return false;
    light_fence();  // the count before the marks; a retirer's heavy fence pairs (sweep_held)
    sweep = (held_marks_[thread_id - 1].load(std::memory_order_relaxed) & held_mark(entry)) != 0;
    return true;
  }
  // The rest of put() for a shared reference, leaving the section `slot` entered.
  void put_shared(CacheEntry& entry, ThreadSlot slot);
  // Thread `thread_id` moves references other threads gave back in `state` for it out of its
  // own count (cache_entry.h, kMaxDebt).  Under the writer mutex, on a live entry: nobody
  // decides about it meanwhile, so the sum may be too high for a moment but is never too low.
  [[gnu::cold, gnu::noinline]] void repay_debt(CacheEntry& entry, unsigned thread_id);
  // The bit that stands for `entry` in a thread's held marks: one of 64, by its address.
  static uint64_t held_mark(const CacheEntry& entry) {
    const uint64_t hash = (reinterpret_cast<uintptr_t>(&entry) >> 3) * 0x9E3779B97F4A7C15ULL;
    return uint64_t{1} << (hash >> 58);
  }
  // Entries retired while threads counted references to them (`listed`, through next, each
  // with a shared reference of ours, and with `marks` the held marks of the threads that
  // counted them) join the held list; then a sweep.
  void hold(CacheEntry* listed, const uint64_t (&marks)[kThreadSlots]);
  // After a heavy fence, every listed entry no thread counts any more leaves the list (and is
  // finalized if that was its last reference); the marks of the threads still counting stay.
  [[gnu::cold, gnu::noinline]] void sweep_held();
  // Adds `mark` to the marks of each thread in `threads` (bit id - 1).
  static void add_marks(uint64_t (&marks)[kThreadSlots], uint64_t threads, uint64_t mark);

  void retire(CacheEntry* entry, Retired& retired);  // out of the index (locked)
  // One heavy fence for all of retired.unsettled, then each finalized if unreferenced; then
  // every dead entry finalized (finalize_all).  Outside the writer mutex.
  void finish(Retired& retired);
  // finish()'s part for retired.unsettled: the heavy fence, then each entry finalized, left to
  // its shared holders, or held (hold()).
  [[gnu::noinline]] void settle(Retired& retired);
  void finalize(CacheEntry* entry);
  // Deregisters and frees `dead` now, or, on a monitor's event thread, hands it to the next
  // cache call on another thread.
  size_t finalize_all(CacheEntry* dead);  // how many it deregistered (0: left to another thread)
  size_t finalize_deferred();  // how many it deregistered
  // Returns once no other thread is deregistering entries taken from deferred_.
  void wait_for_finalizing() const;
  // Returns once the entries in transit when it was called (in_transit_) are deregistered,
  // or none is left in transit: how many entries were deregistered meanwhile (0: none was in
  // transit).  Their NIC resources come back without the application; release_unused() waits
  // for them rather than report nothing given back.
  size_t wait_for_in_transit();

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
  // Entries filed now.  Changed under writer_; atomic so that empty() may be asked without it.
  std::atomic<size_t> count_{0};
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
  std::atomic<uint64_t> invalidations_{0}, evictions_{0}, uncached_{0}, pressure_evictions_{0};
  std::atomic<CacheEntry*> deferred_{nullptr};  // dead entries left by a monitor thread
  bool application_calls_only_ = false;  // deregister_in_application_calls_only()
  std::atomic<uint32_t> finalizing_{0};  // threads deregistering entries taken from deferred_

  std::mutex held_mutex_;
  CacheEntry* held_ = nullptr;  // retired while threads counted them; through next
  // Entries on their way out that nobody but hmr waits for: claimed for finalization and not
  // deregistered yet (on a dead list, deferred_, or in finalize()), and retired ones a writer
  // holds between retire() and settle().  Not those left to the application (an open MR's
  // reference, counted or shared, keeps a retired entry registered until it is closed): a
  // refusal under NIC pressure must not wait for the application (wait_for_in_transit()).
  // Every claim adds one before its finalize() takes it off; settle() takes off its own.
  std::atomic<uint64_t> in_transit_{0};
  std::atomic<uint64_t> finalized_{0};  // entries ever deregistered (their NIC calls ended)
  // Threads inside backend_.deregister now (finalize()): wait_for_in_transit() waits for them
  // without a bound when their calls need nothing from the application.
  std::atomic<uint32_t> nic_deregistrations_{0};
  const uint32_t made_in_fork_;  // forks_counted() at construction: a child's copy is stale
  // wait_for_in_transit()'s bound on rounds without progress (a test lowers it).
  unsigned rounds_without_progress_ = 1u << 20;
  static constexpr std::chrono::milliseconds kMostWithoutProgress{250};  // and its time bound
  // Rounds wait_for_in_transit() ever went through, for a test to see a wait go on past its
  // bound without timing it (a refusal is rare: one relaxed add a round costs nothing).
  std::atomic<uint64_t> rounds_waited_{0};
  std::atomic<bool> held_listed_{false};  // held_ is not empty, for drop_shared() to ask
  // Per thread (id - 1), the held_mark() of each entry on held_ it may still count: its put()
  // of such an entry sweeps, and its other puts do not.  Read by every put() of a counted
  // reference; written only by hold() and sweep_held(), under held_mutex_.
  std::atomic<uint64_t> held_marks_[kThreadSlots] = {};
};

// The hit path, inline: the C ABI's hmr_mr_reg reaches it through one call.

inline RegistrationCache::Served RegistrationCache::take_served(
    const BlockIndex::Slot& slot, uint64_t word, uint64_t meta, const BlockIndex::Slot* table,
    uintptr_t start, uint64_t len, uint32_t exact, unsigned thread_id, Hit& hit) {
  if (BlockIndex::exact_tag_of(meta) != exact) return Served::not_this;  // another key
  const uintptr_t entry_start = ((meta & BlockIndex::kBlockMask) - (word & BlockIndex::kDeltaMask))
                                << BlockIndex::kLevelShift[0];
  const uint64_t entry_length = BlockIndex::blocks_of(meta) << BlockIndex::kLevelShift[0];
  if (start < entry_start || len > entry_length || start - entry_start > entry_length - len) {
    return Served::not_this;
  }
  if ((exact & BlockIndex::kExactStartInTag) != 0 && start != entry_start) return Served::not_this;
  void* const desc = __atomic_load_n(&slot.desc, __ATOMIC_RELAXED);
  const uint64_t key_low = __atomic_load_n(&slot.key_low, __ATOMIC_RELAXED);
  CacheEntry* const entry = BlockIndex::entry_of(word);
  uint32_t before = 0;
  if (__builtin_expect(!OwnerCounts::add(thread_id, entry, before, CacheEntry::kMaxDebt), 0)) {
    return Served::ask_entry;
  }
  if (BlockIndex::owner_of(meta) != thread_id && (word & BlockIndex::kHeldHintBit) == 0) {
    mark_held_elsewhere(slot, word, *entry);
  }
  // The count, then the slot's word and the published table again (Dekker against a retirer,
  // which erases, runs heavy_fence() and reads the counts); the acquire fence closes the
  // seqlock on the fields read above (BlockIndex::store_slot).
  light_fence();
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t again = __atomic_load_n(&slot.word, __ATOMIC_RELAXED);
  if (__builtin_expect(((again ^ word) & BlockIndex::kIdentityMask) != 0 ||
                           index_.published() != table, 0)) {
    undo_stale_count(*entry, thread_id, hit);  // moved or erased: take it back, look again
    hit.retry = true;
    return Served::not_this;
  }
  BlockIndex::mark_hit(slot, again);  // for the CLOCK hand
  hit.handle = CacheHandle{entry, desc, key_low, static_cast<uint8_t>(thread_id)};
  hit.entry_start = entry_start;
  hit.entry_end = entry_start + entry_length;
  return Served::taken;
}

inline bool RegistrationCache::take_if_match(CacheEntry& entry, uintptr_t start, uint64_t len,
                                             const CacheKey& key, unsigned thread_id, Hit& hit) {
  // Ours: counted in our own table with plain stores, unless its two places for this entry
  // hold others' counts (cache/owner_counts.h), when the reference is taken shared below.
  uint32_t owned = 0;
  if (thread_id != 0 && entry.owner == thread_id &&
      __builtin_expect(OwnerCounts::add(thread_id, &entry, owned), 1)) {
    // The count first, then the look at state, as a shared reader does; a retirer reads the
    // count only after a heavy fence (cache_entry.h).
    light_fence();
    const uint32_t seen = entry.state.load(std::memory_order_acquire);
    // Live: its range and key were published by filing it and cannot change while we hold it.
    if (__builtin_expect((seen & CacheEntry::kLive) == 0 || !entry.matches(start, len, key), 0)) {
      refuse_counted(entry, thread_id, /*saturated=*/false, hit);
      return false;
    }
    if (__builtin_expect((seen & CacheEntry::kRefMask) + owned >=
                             CacheEntry::kZero + CacheEntry::kMaxRefs, 0)) {
      refuse_counted(entry, thread_id, /*saturated=*/true, hit);
      return false;
    }
    hit.handle.counted_by = static_cast<uint8_t>(thread_id);
    hit.in_debt = owned >= CacheEntry::kMaxDebt && (seen & CacheEntry::kRefMask) < CacheEntry::kZero;
  } else {
    // One locked add, no compare-exchange loop: whatever state the entry is in, an add undone
    // by refuse_shared() leaves it as it was (cache/cache_entry.h).
    const uint32_t seen = entry.state.fetch_add(1, std::memory_order_acquire);
    if (__builtin_expect((seen & CacheEntry::kLive) == 0 || !entry.matches(start, len, key), 0)) {
      refuse_shared(entry, /*saturated=*/false, hit);  // left the index (or another range)
      return false;
    }
    // Threads' parts taken at their most (OwnerCounts::kMaxCount each) rather than read:
    // reading them would pull other threads' tables, which they write on every hit, into
    // this thread's cache on every hit.  The limit only keeps counts from overflowing.
    if (__builtin_expect((seen & CacheEntry::kRefMask) + kThreadSlots * OwnerCounts::kMaxCount >=
                             CacheEntry::kZero + CacheEntry::kMaxRefs, 0)) {
      refuse_shared(entry, /*saturated=*/true, hit);
      return false;
    }
    // A thread whose own count stopped at kMaxDebt: repay what others gave back for it.
    hit.in_debt = thread_id != 0 && (seen & CacheEntry::kRefMask) < CacheEntry::kZero &&
                  OwnerCounts::of(thread_id, &entry) >= CacheEntry::kMaxDebt;
  }
  return true;
}

inline RegistrationCache::Hit RegistrationCache::lookup(uintptr_t start, uint64_t len,
                                                        const CacheKey& key, ThreadSlot slot) {
  Hit hit;
  CacheEntry* entry;
  const unsigned thread_id = slot.owner_id();
  {
    const ReadSection section(readers_, slot);  // keeps the table we probe from being freed
    const uint32_t tag = KeyTag::of(key);
    // Threads without a table of their own are never served from the slot alone.
    const uint32_t exact = thread_id != 0 ? BlockIndex::exact_tag(tag) : BlockIndex::kNoExactTag;
    auto accept = [&](const BlockIndex::Slot& candidate, uint64_t word, uint64_t meta,
                      const BlockIndex::Slot* table) __attribute__((always_inline)) {
      if ((meta & BlockIndex::kServedBit) != 0 && exact != BlockIndex::kNoExactTag) {
        const Served served =
            take_served(candidate, word, meta, table, start, len, exact, thread_id, hit);
        if (__builtin_expect(served != Served::ask_entry, 1)) return served == Served::taken;
      }
      if (!take_if_match(*BlockIndex::entry_of(word), start, len, key, thread_id, hit)) {
        return false;
      }
      BlockIndex::mark_hit(candidate, word);  // for the CLOCK hand
      return true;
    };
    // A served slot that moved (behind us, maybe) or a table that grew: probe once more, and
    // a few times at most, so a stream of writers cannot hold a reader here.
    for (int probes = 1;; ++probes) {
      entry = index_.find_if(start, tag, accept);
      if (__builtin_expect(entry != nullptr || !hit.retry || probes == 4, 1)) break;
      hit.retry = false;
    }
  }
  if (__builtin_expect(hit.orphans != nullptr, 0)) finalize_all(hit.orphans);
  if (__builtin_expect(hit.sweep, 0)) sweep_held();
  if (entry != nullptr && hit.handle.entry == nullptr) {  // confirmed in the entry
    const uint8_t counted_by = hit.handle.counted_by;
    hit.handle = CacheHandle::shared(entry);
    hit.handle.counted_by = counted_by;
    hit.entry_start = entry->start;
    hit.entry_end = entry->end();
  }
  if (__builtin_expect(hit.in_debt, 0)) repay_debt(*entry, thread_id);  // we hold it
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
  return hit.handle.through_registers();
}

inline void RegistrationCache::put(const CacheHandle& handle, ThreadSlot slot) {
  CacheEntry& entry = *handle.entry;
  // Counted in our own table: the entry is not touched, and lives on for whoever decides.
  bool sweep = false;
  if (__builtin_expect(handle.counted_by != 0 && handle.counted_by == slot.owner_id(), 1) &&
      __builtin_expect(uncount(entry, handle.counted_by, sweep), 1)) {
    if (__builtin_expect(sweep, 0)) sweep_held();
    return;
  }
  // Once our reference is dropped the entry may be finalized by someone else; the section
  // keeps it from being recycled while we still look at it (cache/entry_pool.h).
  readers_.enter(slot);
  put_shared(entry, slot);
}

}  // namespace hmr::core
