// The cache's interval index: a hash of fixed-size address blocks at four granularities
// (4 KiB, 2 MiB, 1 GiB, 512 GiB).  An entry is filed under every block it touches at the
// finest level where that is at most kMaxBlocksPerEntry blocks, so a lookup is one hash probe
// per populated level and never a scan, and a small region costs one or two slots.
//
// A slot is 16 bytes: the entry's address with, in the bits a user-space pointer leaves free,
// the block's delta from the entry's first block, the level and a 14-bit tag of the entry's
// key; and the block number, so probing, growing and deleting never read an entry.  A lookup
// filters on level, tag and block in the slot and confirms range and key in the entry, which
// a hit reads anyway (its reference count, key and descriptor): one slot, then one entry.
// Small slots keep the table in the CPU's caches longer (1.6 MB at 100k regions) and cost
// about 26 bytes per cached region.  Slots are never written by a hit: references and CLOCK
// recency live in the entry, so two threads hitting neighbouring entries share no line.
//
// One writer at a time (the cache's writer mutex), any number of readers alongside it, without
// a lock: find_if() reads the published table and each slot word with single atomic loads, and
// writers store slot words atomically.  A reader racing a writer may miss an entry that is
// being moved or filed (the caller then registers the range anew: a second entry for it,
// valid as the first) or be shown a slot that no longer files that entry; find_if()
// therefore hands every candidate to the caller, which takes a reference and only then checks
// range and key in the entry (entries are never freed, only recycled: cache/entry_pool.h).
// Growing needs a new table, which the caller allocates before taking the writer mutex and
// frees after a grace period (util/read_sections.h), since readers may still be probing the
// old one.
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

  // Entries live below 2^48 (user space on x86-64 and arm64), so a slot's word has the top 16
  // bits for the level and the key's tag; an entry above cannot be filed (fileable()).
  static constexpr unsigned kPointerBits = 48;
  static constexpr unsigned kLevelBit = kPointerBits;     // 2 bits
  static constexpr unsigned kTagBit = kPointerBits + 2;   // 14 bits
  struct alignas(16) Slot {
    // CacheEntry* | delta (bits 0-2) | level << kLevelBit | tag << kTagBit; 0: empty.
    uint64_t word = 0;
    uint64_t block_number = 0;  // the block of its level this slot files the entry under

    bool empty() const { return word == 0; }
    CacheEntry* entry() const {
      return reinterpret_cast<CacheEntry*>(word & kPointerMask & ~kDeltaMask);
    }
    unsigned delta() const { return static_cast<unsigned>(word & kDeltaMask); }
    unsigned level() const { return static_cast<unsigned>(word >> kLevelBit) & (kLevels - 1); }
    uint64_t block() const { return block_number; }
    // Level and tag, as find() compares them.
    uint64_t filter() const { return word & ~kPointerMask; }
  };
  static_assert(sizeof(Slot) == 16);
  static_assert(alignof(CacheEntry) > kMaxBlocksPerEntry - 1, "the delta lives in the pointer");

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
  // Safe beside a writer: hands accept(entry) each entry whose slot, for a block holding
  // `start`, passes the filter for `tag`, until accept says yes; returns that entry, or
  // nullptr.  The entry may have changed since it was filed: accept must pin it (a reference)
  // before it trusts its range and key.
  template <typename Accept>
  [[gnu::always_inline]] CacheEntry* find_if(uintptr_t start, uint32_t tag,
                                             Accept&& accept) const;
  // The slot filing `entry` under `block` of its level; nullptr once the entry has left.
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
  // said 0), with `tag` = KeyTag::of(entry->key).
  void insert(CacheEntry* entry, uint32_t tag);
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
  static constexpr uint64_t kDeltaMask = kMaxBlocksPerEntry - 1;
  static constexpr uint64_t kPointerMask = (uint64_t{1} << kPointerBits) - 1;
  // The filter bits of a slot of `level` for an entry whose key has KeyTag `tag`.
  static uint64_t filter_of(unsigned level, uint32_t tag) {
    const uint64_t folded = (tag * uint64_t{0x9E3779B1}) >> 18 & 0x3fff;  // 14 bits
    return static_cast<uint64_t>(level) << kLevelBit | folded << kTagBit;
  }

  size_t next(size_t i) const { return i + 1 == table_.capacity() ? 0 : i + 1; }
  void insert_slot(const Slot& slot);
  Slot erase_slot(const CacheEntry* entry, unsigned level, uint64_t block);
  // Every store to a published slot is atomic, word by word: readers load them beside us.  The
  // word (the entry's address) is stored with release and loaded with acquire (plain moves on
  // x86): a reader that finds an entry sees what was written to it before it was filed.
  static void store_slot(Slot& to, const Slot& value) {
    __atomic_store_n(&to.block_number, value.block_number, __ATOMIC_RELAXED);
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
  for (size_t i = home(level, block);; i = next(i)) {
    Slot& slot = table_.slots()[i];
    if (slot.empty()) return nullptr;
    if (slot.entry() == entry && slot.block() == block && slot.level() == level) return &slot;
  }
}

template <typename Accept>
inline CacheEntry* BlockIndex::find_if(uintptr_t start, uint32_t tag, Accept&& accept) const {
  const Slot* slots = published_.load(std::memory_order_acquire);
  const size_t capacity = static_cast<size_t>(slots[-1].block_number);  // the header
  for (unsigned level = 0; level < kLevels; ++level) {
    if (!level_populated(level)) continue;
    const uint64_t block = start >> kLevelShift[level];
    // The level is part of the filter: a slot of another level with the same block number
    // must not be taken (put() looks for the slot under this level's block).
    const uint64_t wanted = filter_of(level, tag);
    // At most one lap: a table is never full, but a reader racing writers could in principle
    // keep meeting moved slots.
    size_t i = home_in(capacity, level, block);
    for (size_t probes = 0; probes < capacity; ++probes, i = i + 1 == capacity ? 0 : i + 1) {
      const uint64_t word = __atomic_load_n(&slots[i].word, __ATOMIC_ACQUIRE);
      if (word == 0) break;
      if ((word & ~kPointerMask) != wanted) continue;
      if (__atomic_load_n(&slots[i].block_number, __ATOMIC_RELAXED) != block) continue;
      CacheEntry* entry = reinterpret_cast<CacheEntry*>(word & kPointerMask & ~kDeltaMask);
      if (accept(*entry)) return entry;
    }
  }
  return nullptr;
}

inline BlockIndex::Slot* BlockIndex::find(uintptr_t start, uint64_t len, const CacheKey& key,
                                          uint32_t tag) const {
  CacheEntry* found = find_if(start, tag, [&](const CacheEntry& entry) {
    return entry.matches(start, len, key);
  });
  if (found == nullptr) return nullptr;
  const unsigned level = found->level;
  return slot_of(found, level, start >> kLevelShift[level]);
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
      for (size_t i = home(level, block);; i = next(i)) {
        const Slot& slot = table_.slots()[i];
        if (slot.empty()) break;
        if (slot.level() != level || slot.block() != block) continue;
        CacheEntry* entry = slot.entry();
        if (entry->start < end && start < entry->end()) visit(entry);
      }
    }
  }
}

template <typename Visit>
void BlockIndex::for_each_slot_of(Slot& first, Visit&& visit) const {
  const unsigned level = first.level();
  const uint64_t first_block = first.block();
  CacheEntry* const entry = first.entry();
  const uint64_t last_block = (entry->end() - 1) >> kLevelShift[level];
  visit(first);
  for (uint64_t block = first_block + 1; block <= last_block; ++block) {
    if (Slot* slot = slot_of(entry, level, block)) visit(*slot);
  }
}

}  // namespace hmr::core
