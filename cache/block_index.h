// The cache's interval index: a hash of fixed-size address blocks at four granularities
// (4 KiB, 2 MiB, 1 GiB, 512 GiB).  An entry is filed under every block it touches at the
// finest level where that is at most kMaxBlocksPerEntry blocks, so a lookup is one hash probe
// per populated level and never a scan, and a small region costs one or two slots.
//
// A slot is 32 bytes, half a cache line: the entry's address with, in the bits a user-space
// pointer leaves free, the block's delta from the entry's first block, the level, a CLOCK
// recency, a "held elsewhere" hint and an 11-bit fold of the entry's key tag; the block
// number with the filing thread's id, the exact tag of a host key, the entry's length in
// 4 KiB blocks and a "served from the slot" bit; and the registration's descriptor and key.
// An entry that starts and ends on 4 KiB pages and has an exact host key (cache/key_tag.h) is
// served from the slot: a hit checks range and key, and hands out descriptor and key, from
// the slot alone, so it misses the CPU's caches once (docs/performance.md, "One miss per
// hit").  Other entries are confirmed in the entry.  At 1.57 slots per region (load 0.64 at
// 1M regions) slots cost about 50 bytes per cached region.
//
// One writer at a time (the cache's writer mutex), any number of readers alongside it, without
// a lock: find_if() reads the published table and each slot with atomic loads, and writers
// store slots atomically, field by field, as a seqlock on the word: the word is cleared first,
// then the rest is written, then the word (store_slot).  A reader takes the fields it read as
// one slot's only if the word reads the same before and after them.  A reader racing a writer
// may miss an entry that is being moved or filed (the caller then registers the range anew: a
// second entry for it, valid as the first) or be shown a slot that no longer files that
// entry; every candidate is handed to the caller, which pins the entry (a reference) and only
// then trusts it: for a slot-served hit, by reading the slot's word and the published table
// again after counting (RegistrationCache).  Entries are never freed, only recycled
// (cache/entry_pool.h).  Growing needs a new table, which the caller allocates before taking
// the writer mutex and frees after a grace period (util/read_sections.h), since readers may
// still be probing the old one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cache/cache_entry.h"
#include "cache/key_tag.h"
#include "util/page_array.h"

namespace hmr::core {

class BlockIndex {
  __extension__ typedef unsigned __int128 Wide;  // GCC and clang on 64-bit targets

 public:
  static constexpr unsigned kLevels = 4;
  static constexpr unsigned kLevelShift[kLevels] = {12, 21, 30, 39};
  static constexpr uint64_t kMaxBlocksPerEntry = 8;

  // Entries live below 2^48 (user space on x86-64 and arm64): a slot's word has the top 16
  // bits for the level, two flags and the key's fold, and its meta has the 28 bits above the
  // 36 bits of a block number (block_at()).
  static constexpr unsigned kPointerBits = 48;
  static constexpr unsigned kLevelBit = kPointerBits;       // 2 bits
  // CLOCK recency, 2 bits: filing sets 1, a hit 2, each pass of the hand takes 1 off.
  static constexpr unsigned kRecencyShift = kPointerBits + 2;
  static constexpr uint64_t kRecencyMask = uint64_t{3} << kRecencyShift;
  static constexpr uint64_t kFiledRecency = uint64_t{1} << kRecencyShift;
  static constexpr uint64_t kHitRecency = uint64_t{2} << kRecencyShift;
  static constexpr uint64_t kHeldHintBit = uint64_t{1} << (kPointerBits + 4);
  static constexpr unsigned kFoldBit = kPointerBits + 5;    // 11 bits
  static constexpr unsigned kBlockBits = kPointerBits - 12;  // level 0's block numbers
  static constexpr unsigned kOwnerBit = kBlockBits;           // 7 bits
  static constexpr unsigned kExactTagBit = kOwnerBit + 7;     // 15 bits
  static constexpr unsigned kBlocksBit = kExactTagBit + 15;   // 3 bits: length in blocks - 1
  static constexpr uint64_t kServedBit = uint64_t{1} << (kBlocksBit + 3);
  static constexpr uint32_t kExactStartInTag = 1u << 14;  // exact_start, in an exact tag
  static constexpr uint32_t kNoExactTag = 1u << 15;  // matches no slot's exact tag
  static constexpr uint64_t kPointerMask = (uint64_t{1} << kPointerBits) - 1;
  static constexpr uint64_t kDeltaMask = kMaxBlocksPerEntry - 1;
  static constexpr uint64_t kBlockMask = (uint64_t{1} << kBlockBits) - 1;
  // What identifies the slot's filing in its word: all but the bits hits set.
  static constexpr uint64_t kIdentityMask = ~(kRecencyMask | kHeldHintBit);
  struct alignas(32) Slot {
    // CacheEntry* | delta (bits 0-2) | level << kLevelBit | recency | held hint | fold; 0: empty.
    uint64_t word = 0;
    // block | owner << kOwnerBit | exact tag << kExactTagBit | (blocks - 1) << kBlocksBit |
    // served.  In the table's header slot: the capacity.
    uint64_t meta = 0;
    void* desc = nullptr;  // the registration's, as CacheEntry has them
    uint64_t key_low = 0;

    // The word as the writer reads it: atomically, since hits set its recency and hint bits
    // beside the writer.  The other fields only the writer changes.
    uint64_t filing() const { return __atomic_load_n(&word, __ATOMIC_RELAXED); }
    bool empty() const { return filing() == 0; }
    CacheEntry* entry() const { return entry_of(filing()); }
    unsigned delta() const { return static_cast<unsigned>(filing() & kDeltaMask); }
    unsigned level() const {
      return static_cast<unsigned>(filing() >> kLevelBit) & (kLevels - 1);
    }
    uint64_t block() const { return meta & kBlockMask; }
    // A copy, for the writer to move it.
    Slot copy() const {
      Slot slot;
      slot.word = filing();
      slot.meta = meta;  // the fields only the writer changes
      slot.desc = desc;
      slot.key_low = key_low;
      return slot;
    }
  };
  static_assert(sizeof(Slot) == 32);
  static_assert(alignof(CacheEntry) > kMaxBlocksPerEntry - 1, "the delta lives in the pointer");
  // The block of `address` at `level` as slots file it: its low kBlockBits bits (blocks of
  // addresses above 2^48 alias, and are told apart by the entry's range; no slot serves them).
  static uint64_t block_at(uintptr_t address, unsigned level) {
    return (address >> kLevelShift[level]) & kBlockMask;
  }
  static CacheEntry* entry_of(uint64_t word) {
    return reinterpret_cast<CacheEntry*>(word & kPointerMask & ~kDeltaMask);
  }
  static unsigned owner_of(uint64_t meta) { return static_cast<unsigned>(meta >> kOwnerBit) & 0x7f; }
  static uint32_t exact_tag_of(uint64_t meta) {
    return static_cast<uint32_t>(meta >> kExactTagBit) & 0x7fff;
  }
  static uint64_t blocks_of(uint64_t meta) { return (meta >> kBlocksBit & 7) + 1; }
  // A KeyTag folded into the 15 bits of a served slot's exact tag; kNoExactTag when it does
  // not fit (a hashed tag, or access bits above bit 13).
  static uint32_t exact_tag(uint32_t tag) {
    if (!KeyTag::is_exact(tag) || (tag & KeyTag::kAccessBits) >= (1u << 14)) return kNoExactTag;
    return (tag & 0x3fff) | ((tag & KeyTag::kExactStart) != 0 ? kExactStartInTag : 0);
  }

  // A table allocated outside the lock, adopted under it.  Its first slot is a header that
  // holds the capacity, so that a reader gets slots and capacity from one published pointer.
  struct Table {
    PageArray<Slot> storage;  // the header, then the slots; huge pages from 2 MiB (64k slots) up

    Slot* slots() const { return storage.get() + 1; }
    size_t capacity() const { return storage.size() == 0 ? 0 : storage.size() - 1; }
  };

  BlockIndex();

  static unsigned level_for(uintptr_t start, uint64_t length);
  // Whether [start, start+length) can be filed: not empty, not wrapping, and at most
  // kMaxBlocksPerEntry blocks even at the top level (so up to 3.5 TiB at least).  The cache
  // hands anything else out uncached.
  static bool indexable(uintptr_t start, uint64_t length);
  // Whether the entry's address leaves a slot's top bits free (always, on Linux's default
  // user address space).
  static bool fileable(const CacheEntry* entry) {
    return (reinterpret_cast<uintptr_t>(entry) & ~kPointerMask) == 0;
  }
  static size_t slots_needed(const CacheEntry& entry);

  // The slot through which [start, start+len) hits a live entry with `key` (`tag` is
  // KeyTag::of(key)); nullptr if none.  Reads the entries whose slot passes the filter; for
  // the writer side (and tests), where entries cannot change meanwhile.
  Slot* find(uintptr_t start, uint64_t len, const CacheKey& key, uint32_t tag) const;
  // Safe beside a writer: hands accept(slot, word, meta, slots) each slot that, for a block
  // holding `start`, passes the filter for `tag` (`word` and `meta` as read; `slots` the
  // table probed), until accept says yes; returns that slot's entry, or nullptr.  The entry
  // may have changed since it was filed: accept must pin it (a reference) before it trusts
  // the slot or the entry.
  template <typename Accept>
  [[gnu::always_inline]] CacheEntry* find_if(uintptr_t start, uint32_t tag,
                                             Accept&& accept) const;
  // The table readers probe now, to compare with the one a probe used.
  const Slot* published() const { return published_.load(std::memory_order_acquire); }
  // The slot filing `entry` under `block` of its level (block_at()); nullptr once the entry has
  // left.
  Slot* slot_of(const CacheEntry* entry, unsigned level, uint64_t block) const;

  // Calls visit(entry) for each entry overlapping [start, end), possibly more than once.  Reads
  // the entries of the blocks the range touches.
  template <typename Visit>
  void for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const;
  // Calls visit(slot) for `first` — an entry's first slot (delta 0) — and each other slot
  // filing the same entry.
  template <typename Visit>
  void for_each_slot_of(Slot& first, Visit&& visit) const;

  // Capacity needed to hold `extra_slots` more; 0 when the current table suffices.
  size_t capacity_for(size_t extra_slots) const;
  static Table make_table(size_t capacity);
  // Rehashes into `fresh` and gives back the old table for the caller to free unlocked.
  Table adopt(Table fresh);

  // Files the entry under each block it touches (the table must have room: capacity_for
  // said 0), with `tag` = KeyTag::of(entry->key), and the recency of a fresh filing.
  void insert(CacheEntry* entry, uint32_t tag);
  // Takes one off the recency of each of the entry's slots (`first` is its delta-0 slot);
  // whether any had some.  For the CLOCK hand, under the writer mutex.
  bool take_recency(Slot& first);
  // A hit's mark on the slot it used, unless it has as much already.  Best effort: a
  // compare-exchange that may lose to a writer or the hand, which costs an early eviction.
  static void mark_hit(const Slot& slot, uint64_t word) {
    if ((word & kRecencyMask) < kHitRecency) {
      try_rewrite(slot, word, (word & ~kRecencyMask) | kHitRecency);
    }
  }
  // Replaces the word of `slot`, seen as `seen`, with `wanted` (which differs only in bits
  // hits set) unless it changed meanwhile.  Hits see slots as const: these bits are the one
  // thing a reader writes.
  static void try_rewrite(const Slot& slot, uint64_t seen, uint64_t wanted) {
    (void)__atomic_compare_exchange_n(const_cast<uint64_t*>(&slot.word), &seen, wanted, false,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
  // Takes the entry out of every block it was filed under.
  void erase(CacheEntry* entry);
  size_t slots_used() const { return used_; }
  size_t capacity() const { return table_.capacity(); }
  // The writer's view; readers use find_if().
  Slot& slot_at(size_t i) const { return table_.slots()[i]; }
  // Where the probe for `block` of `level` starts: Fibonacci hashing of (level, block),
  // mapped onto any capacity by a multiply ("fastrange"), so the table can grow by 1.5x
  // instead of doubling.  Public for tests that need to build colliding probe runs.
  size_t home(unsigned level, uint64_t block) const {
    return home_in(table_.capacity(), level, block);
  }
  static size_t home_in(size_t capacity, unsigned level, uint64_t block) {
    const uint64_t hash = (static_cast<uint64_t>(level) << 60 | block) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>((static_cast<Wide>(hash) * capacity) >> 64);
  }

 private:
  static constexpr uint64_t kFilterMask =
      uint64_t{kLevels - 1} << kLevelBit | uint64_t{0x7ff} << kFoldBit;
  // The filter bits of a slot of `level` for an entry whose key has KeyTag `tag`.
  static uint64_t filter_of(unsigned level, uint32_t tag) {
    const uint64_t folded = (tag * uint64_t{0x9E3779B1}) >> 21 & 0x7ff;  // 11 bits
    return static_cast<uint64_t>(level) << kLevelBit | folded << kFoldBit;
  }

  size_t next(size_t i) const { return i + 1 == table_.capacity() ? 0 : i + 1; }
  void insert_slot(const Slot& slot);
  Slot erase_slot(const CacheEntry* entry, unsigned level, uint64_t block);
  // Every store to a published slot is atomic, field by field: readers load them beside us.
  // The seqlock: the word is cleared, then (after a release fence) the rest is written, then
  // the word with release, so a reader that read any field of the new slot reads the word
  // changed when it looks again (find_if's callers), and a reader that finds an entry sees
  // what was written to it before it was filed.  Plain moves on x86.
  static void store_slot(Slot& to, const Slot& value) {
    __atomic_store_n(&to.word, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&to.meta, value.meta, __ATOMIC_RELAXED);
    __atomic_store_n(&to.desc, value.desc, __ATOMIC_RELAXED);
    __atomic_store_n(&to.key_low, value.key_low, __ATOMIC_RELAXED);
    __atomic_store_n(&to.word, value.word, __ATOMIC_RELEASE);
  }
  bool level_populated(unsigned level) const {
    return entries_per_level_[level].load(std::memory_order_relaxed) != 0;
  }
  void add_to_level(unsigned level, int delta) {  // the one writer: no locked add needed
    std::atomic<size_t>& count = entries_per_level_[level];
    count.store(count.load(std::memory_order_relaxed) + static_cast<size_t>(delta),
                std::memory_order_relaxed);
  }

  Table table_;                        // the writer's
  std::atomic<Slot*> published_{nullptr};  // table_.slots(), for readers
  size_t used_ = 0;
  std::atomic<size_t> entries_per_level_[kLevels] = {};
};

inline BlockIndex::Slot* BlockIndex::slot_of(const CacheEntry* entry, unsigned level,
                                             uint64_t block) const {
  block &= kBlockMask;
  for (size_t i = home(level, block);; i = next(i)) {
    Slot& slot = table_.slots()[i];
    if (slot.empty()) return nullptr;
    if (slot.entry() == entry && slot.block() == block && slot.level() == level) return &slot;
  }
}

template <typename Accept>
inline CacheEntry* BlockIndex::find_if(uintptr_t start, uint32_t tag, Accept&& accept) const {
  const Slot* slots = published_.load(std::memory_order_acquire);
  const size_t capacity = static_cast<size_t>(slots[-1].meta);  // the header
  for (unsigned level = 0; level < kLevels; ++level) {
    if (!level_populated(level)) continue;
    const uint64_t block = block_at(start, level);
    // The level is part of the filter: a slot of another level with the same block number
    // must not be taken (put() looks for the slot under this level's block).
    const uint64_t wanted = filter_of(level, tag);
    // At most one lap: a table is never full, but a reader racing writers could in principle
    // keep meeting moved slots.
    size_t i = home_in(capacity, level, block);
    for (size_t probes = 0; probes < capacity; ++probes, i = i + 1 == capacity ? 0 : i + 1) {
      const uint64_t word = __atomic_load_n(&slots[i].word, __ATOMIC_ACQUIRE);
      if (word == 0) break;
      if ((word & kFilterMask) != wanted) continue;
      const uint64_t meta = __atomic_load_n(&slots[i].meta, __ATOMIC_RELAXED);
      if ((meta & kBlockMask) != block) continue;
      if (accept(slots[i], word, meta, slots)) return entry_of(word);
    }
  }
  return nullptr;
}

inline BlockIndex::Slot* BlockIndex::find(uintptr_t start, uint64_t len, const CacheKey& key,
                                          uint32_t tag) const {
  CacheEntry* found = find_if(start, tag, [&](const Slot&, uint64_t word, uint64_t, const Slot*) {
    return entry_of(word)->matches(start, len, key);
  });
  if (found == nullptr) return nullptr;
  const unsigned level = found->level;
  return slot_of(found, level, block_at(start, level));
}

template <typename Visit>
void BlockIndex::for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const {
  if (end <= start) return;
  for (unsigned level = 0; level < kLevels; ++level) {
    if (!level_populated(level)) continue;
    const uint64_t first = start >> kLevelShift[level];
    const uint64_t last = (end - 1) >> kLevelShift[level];
    if (last - first >= table_.capacity()) {
      // The range spans more blocks than the table has slots: one pass over the table is less.
      for (size_t i = 0; i < table_.capacity(); ++i) {
        const Slot& slot = table_.slots()[i];
        if (slot.empty() || slot.level() != level) continue;
        CacheEntry* entry = slot.entry();
        if (entry->start < end && start < entry->end()) visit(entry);
      }
      continue;
    }
    for (uint64_t block = first; block <= last; ++block) {
      const uint64_t filed = block & kBlockMask;
      for (size_t i = home(level, filed);; i = next(i)) {
        const Slot& slot = table_.slots()[i];
        if (slot.empty()) break;
        if (slot.level() != level || slot.block() != filed) continue;
        CacheEntry* entry = slot.entry();
        if (entry->start < end && start < entry->end()) visit(entry);
      }
    }
  }
}

template <typename Visit>
void BlockIndex::for_each_slot_of(Slot& first, Visit&& visit) const {
  const unsigned level = first.level();
  CacheEntry* const entry = first.entry();
  const uint64_t first_block = entry->start >> kLevelShift[level];
  const uint64_t last_block = (entry->end() - 1) >> kLevelShift[level];
  visit(first);
  for (uint64_t block = first_block + 1; block <= last_block; ++block) {
    if (Slot* slot = slot_of(entry, level, block)) visit(*slot);
  }
}

}  // namespace hmr::core
