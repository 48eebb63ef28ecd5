// The cache's interval index: a hash of fixed-size address blocks at four granularities
// (4 KiB, 2 MiB, 1 GiB, 512 GiB).  An entry is filed under every block it touches at the
// finest level where that is at most kMaxBlocksPerEntry blocks, so a lookup is one hash probe
// per populated level and never a scan, and a small region costs one or two slots.
//
// Not synchronised: the cache reads it under the shared side of its lock and changes it
// under the exclusive side.  Growing needs a new table, which the caller allocates before
// taking the lock (no allocation under the lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cache/cache_entry.h"

namespace hmr::core {

class BlockIndex {
 public:
  static constexpr unsigned kLevels = 4;
  static constexpr unsigned kLevelShift[kLevels] = {12, 21, 30, 39};
  static constexpr uint64_t kMaxBlocksPerEntry = 8;

  struct Slot {
    uint64_t block_key = 0;  // level << 60 | block number
    CacheEntry* entry = nullptr;
  };
  // A table allocated outside the lock, adopted under it.
  struct Table {
    std::unique_ptr<Slot[]> slots;
    size_t capacity = 0;  // a power of two
  };

  BlockIndex();

  static unsigned level_for(uintptr_t start, uint64_t length);
  static size_t slots_needed(const CacheEntry& entry);

  // The first live entry that contains [start, start+len) and has `key`; nullptr if none.
  CacheEntry* find(uintptr_t start, uint64_t len, const CacheKey& key) const;
  // Calls visit(entry) for each entry overlapping [start, end), possibly more than once.
  template <typename Visit>
  void for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const;

  // Capacity needed to hold `extra_slots` more; 0 when the current table suffices.
  size_t capacity_for(size_t extra_slots) const;
  static Table make_table(size_t capacity);
  // Rehashes into `fresh` and gives back the old table for the caller to free unlocked.
  Table adopt(Table fresh);

  void insert(CacheEntry* entry);  // the table must have room (capacity_for said 0)
  void erase(CacheEntry* entry);
  size_t slots_used() const { return used_; }
  size_t capacity() const { return table_.capacity; }

 private:
  static uint64_t block_key(unsigned level, uint64_t block) {
    return static_cast<uint64_t>(level) << 60 | block;
  }
  size_t home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void insert_slot(uint64_t key, CacheEntry* entry);
  void erase_slot(uint64_t key, CacheEntry* entry);

  Table table_;
  unsigned shift_ = 0;  // 64 - log2(capacity)
  size_t used_ = 0;
  size_t entries_per_level_[kLevels] = {};
};

template <typename Visit>
void BlockIndex::for_each_overlapping(uintptr_t start, uintptr_t end, Visit&& visit) const {
  if (end <= start) return;
  const size_t mask = table_.capacity - 1;
  for (unsigned level = 0; level < kLevels; ++level) {
    if (entries_per_level_[level] == 0) continue;
    const uint64_t first = start >> kLevelShift[level];
    const uint64_t last = (end - 1) >> kLevelShift[level];
    if (last - first >= table_.capacity) {
      // The range spans more blocks than the table has slots: one pass over the table is less.
      for (size_t i = 0; i < table_.capacity; ++i) {
        const Slot& slot = table_.slots[i];
        if (slot.entry != nullptr && slot.entry->level == level && slot.entry->start < end &&
            start < slot.entry->end()) {
          visit(slot.entry);
        }
      }
      continue;
    }
    for (uint64_t block = first; block <= last; ++block) {
      const uint64_t key = block_key(level, block);
      for (size_t i = home(key);; i = (i + 1) & mask) {
        const Slot& slot = table_.slots[i];
        if (slot.entry == nullptr) break;
        if (slot.block_key == key && slot.entry->start < end && start < slot.entry->end()) {
          visit(slot.entry);
        }
      }
    }
  }
}

}  // namespace hmr::core
