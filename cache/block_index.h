// The cache's interval index: a hash of fixed-size address blocks at four granularities
// (4 KiB, 2 MiB, 1 GiB, 512 GiB).  An entry is filed under every block it touches at the
// finest level where that is at most kMaxBlocksPerEntry blocks, so a lookup is one hash probe
// per populated level and never a scan, and a small region costs one or two slots.
//
// A slot carries what a lookup needs — the entry's range and a tag of its key — so a lookup
// reads one 32-byte slot (half a cache line, on one page) and then only the entry it found.
// Slots are never written by a hit: references and CLOCK recency live in the entry, which the
// caller reads anyway for its key, so two threads hitting neighbouring entries share no line.
//
// Not synchronised: the cache reads it under the shared side of its lock and changes it under
// the exclusive side.  Growing needs a new
// table, which the caller allocates before taking the lock (no allocation under the lock).
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

  struct alignas(32) Slot {
    uintptr_t tagged_entry = 0;  // CacheEntry* | the block's delta from the entry's first (0..7)
    uintptr_t start = 0;         // the entry's range
    uintptr_t end = 0;
    uint32_t key_tag = 0;        // KeyTag::of(entry key) | level << kLevelTagShift

    bool empty() const { return tagged_entry == 0; }
    CacheEntry* entry() const { return reinterpret_cast<CacheEntry*>(tagged_entry & ~kDeltaMask); }
    unsigned delta() const { return static_cast<unsigned>(tagged_entry & kDeltaMask); }
    unsigned level() const { return (key_tag >> kLevelTagShift) & (kLevels - 1); }
    uint64_t block() const { return (start >> kLevelShift[level()]) + delta(); }
  };
  static_assert(sizeof(Slot) == 32);
  static_assert(alignof(CacheEntry) > kMaxBlocksPerEntry - 1, "the delta lives in the pointer");

  // A table allocated outside the lock, adopted under it.
  struct Table {
    PageArray<Slot> slots;  // huge pages from 2 MiB (64k slots) up
    size_t capacity = 0;
  };

  BlockIndex();

  static unsigned level_for(uintptr_t start, uint64_t length);
  // Whether [start, start+length) can be filed: not empty, not wrapping, and at most
  // kMaxBlocksPerEntry blocks even at the top level (so up to 3.5 TiB at least).  The cache
  // hands anything else out uncached.
  static bool indexable(uintptr_t start, uint64_t length);
  static size_t slots_needed(const CacheEntry& entry);

  // The slot through which [start, start+len) hits a live entry with `key` (`tag` is
  // KeyTag::of(key)); nullptr if none.  Reads the entry only for a hashed tag.
  Slot* find(uintptr_t start, uint64_t len, const CacheKey& key, uint32_t tag) const;
  // The slot filing `entry` under `block` of its level; nullptr once the entry has left.
  Slot* slot_of(const CacheEntry* entry, unsigned level, uint64_t block) const;

  // Calls visit(entry) for each entry overlapping [start, end), possibly more than once.
  template <typename Visit>
  void for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const;
  // Calls visit(slot) for `first` — an entry's first slot (delta 0) — and each other slot
  // filing the same entry.  Reads only the slots.
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
  size_t capacity() const { return table_.capacity; }
  Slot& slot_at(size_t i) const { return table_.slots[i]; }
  // Where the probe for `block` of `level` starts: Fibonacci hashing of (level, block),
  // mapped onto any capacity by a multiply ("fastrange"), so the table can grow by 1.5x
  // instead of doubling.  Public for tests that need to build colliding probe runs.
  size_t home(unsigned level, uint64_t block) const {
    const uint64_t hash = (static_cast<uint64_t>(level) << 60 | block) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>((static_cast<Wide>(hash) * table_.capacity) >> 64);
  }

 private:
  static constexpr uintptr_t kDeltaMask = kMaxBlocksPerEntry - 1;
  static constexpr unsigned kLevelTagShift = 29;
  static_assert((KeyTag::kIndexBits >> kLevelTagShift) == kLevels - 1);

  size_t next(size_t i) const { return i + 1 == table_.capacity ? 0 : i + 1; }
  void insert_slot(const Slot& slot);
  Slot erase_slot(const CacheEntry* entry, unsigned level, uint64_t block);

  Table table_;
  size_t used_ = 0;
  size_t entries_per_level_[kLevels] = {};
};

inline BlockIndex::Slot* BlockIndex::slot_of(const CacheEntry* entry, unsigned level,
                                             uint64_t block) const {
  for (size_t i = home(level, block);; i = next(i)) {
    Slot& slot = table_.slots[i];
    if (slot.empty()) return nullptr;
    if (slot.entry() == entry && slot.block() == block) return &slot;
  }
}

inline BlockIndex::Slot* BlockIndex::find(uintptr_t start, uint64_t len, const CacheKey& key,
                                   uint32_t tag) const {
  for (unsigned level = 0; level < kLevels; ++level) {
    if (entries_per_level_[level] == 0) continue;
    const uint64_t block = start >> kLevelShift[level];
    // The level is part of the compared tag: a slot of another level whose computed block
    // happens to match must not be taken (put() looks for the slot under this level's block).
    const uint32_t wanted = tag | level << kLevelTagShift;
    for (size_t i = home(level, block);; i = next(i)) {
      Slot& slot = table_.slots[i];
      if (slot.empty()) break;
      if (slot.key_tag != wanted) continue;
      const uint64_t length = slot.end - slot.start;
      if (start < slot.start || len > length || start - slot.start > length - len) continue;
      if ((slot.start >> kLevelShift[level]) + slot.delta() != block) continue;
      if (key.exact_start && slot.start != start) continue;
      if (!KeyTag::is_exact(tag) && !(slot.entry()->key == key)) continue;
      return &slot;
    }
  }
  return nullptr;
}

template <typename Visit>
void BlockIndex::for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const {
  if (end <= start) return;
  for (unsigned level = 0; level < kLevels; ++level) {
    if (entries_per_level_[level] == 0) continue;
    const uint64_t first = start >> kLevelShift[level];
    const uint64_t last = (end - 1) >> kLevelShift[level];
    if (last - first >= table_.capacity) {
      // The range spans more blocks than the table has slots: one pass over the table is less.
      for (size_t i = 0; i < table_.capacity; ++i) {
        const Slot& slot = table_.slots[i];
        if (!slot.empty() && slot.level() == level && slot.start < end && start < slot.end) {
          visit(slot.entry());
        }
      }
      continue;
    }
    for (uint64_t block = first; block <= last; ++block) {
      for (size_t i = home(level, block);; i = next(i)) {
        const Slot& slot = table_.slots[i];
        if (slot.empty()) break;
        if (slot.level() == level && slot.block() == block && slot.start < end &&
            start < slot.end) {
          visit(slot.entry());
        }
      }
    }
  }
}

template <typename Visit>
void BlockIndex::for_each_slot_of(Slot& first, Visit&& visit) const {
  const unsigned level = first.level();
  const uint64_t first_block = first.block();
  const uint64_t last_block = (first.end - 1) >> kLevelShift[level];
  CacheEntry* const entry = first.entry();
  visit(first);
  for (uint64_t block = first_block + 1; block <= last_block; ++block) {
    if (Slot* slot = slot_of(entry, level, block)) visit(*slot);
  }
}

}  // namespace hmr::core
