#include "core/cache/block_index.h"

#include <bit>
#include <utility>

namespace hmr::core {
namespace {
constexpr size_t kInitialCapacity = 64;
// Linear probing stays short below this load.
constexpr size_t max_load(size_t capacity) { return capacity / 4 * 3; }
}  // namespace

BlockIndex::BlockIndex() { (void)adopt(make_table(kInitialCapacity)); }

unsigned BlockIndex::level_for(uintptr_t start, uint64_t length) {
  const uintptr_t last = start + length - 1;
  for (unsigned level = 0; level + 1 < kLevels; ++level) {
    const uint64_t blocks = (last >> kLevelShift[level]) - (start >> kLevelShift[level]) + 1;
    if (blocks <= kMaxBlocksPerEntry) return level;
  }
  return kLevels - 1;
}

size_t BlockIndex::slots_needed(const CacheEntry& entry) {
  const unsigned shift = kLevelShift[entry.level];
  return static_cast<size_t>(((entry.end() - 1) >> shift) - (entry.start >> shift) + 1);
}

CacheEntry* BlockIndex::find(uintptr_t start, uint64_t len, const CacheKey& key) const {
  const size_t mask = table_.capacity - 1;
  for (unsigned level = 0; level < kLevels; ++level) {
    if (entries_per_level_[level] == 0) continue;
    const uint64_t wanted = block_key(level, start >> kLevelShift[level]);
    for (size_t i = home(wanted);; i = (i + 1) & mask) {
      const Slot& slot = table_.slots[i];
      if (slot.entry == nullptr) break;
      if (slot.block_key == wanted && slot.entry->contains(start, len) &&
          slot.entry->key == key && (!key.exact_start || slot.entry->start == start)) {
        return slot.entry;
      }
    }
  }
  return nullptr;
}

size_t BlockIndex::capacity_for(size_t extra_slots) const {
  size_t capacity = table_.capacity;
  while (used_ + extra_slots > max_load(capacity)) capacity *= 2;
  return capacity == table_.capacity ? 0 : capacity;
}

BlockIndex::Table BlockIndex::make_table(size_t capacity) {
  Table table;
  table.slots = std::make_unique<Slot[]>(capacity);
  table.capacity = capacity;
  return table;
}

BlockIndex::Table BlockIndex::adopt(Table fresh) {
  Table old = std::exchange(table_, std::move(fresh));
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(table_.capacity));
  used_ = 0;
  for (size_t i = 0; i < old.capacity; ++i) {
    if (old.slots[i].entry != nullptr) insert_slot(old.slots[i].block_key, old.slots[i].entry);
  }
  return old;
}

void BlockIndex::insert_slot(uint64_t key, CacheEntry* entry) {
  const size_t mask = table_.capacity - 1;
  size_t i = home(key);
  while (table_.slots[i].entry != nullptr) i = (i + 1) & mask;
  table_.slots[i] = Slot{key, entry};
  ++used_;
}

void BlockIndex::erase_slot(uint64_t key, CacheEntry* entry) {
  const size_t mask = table_.capacity - 1;
  size_t hole = home(key);
  while (!(table_.slots[hole].block_key == key && table_.slots[hole].entry == entry)) {
    if (table_.slots[hole].entry == nullptr) return;  // not filed: nothing to erase
    hole = (hole + 1) & mask;
  }
  // Backward-shift deletion: pull later members of the probe run into the hole, so no
  // tombstones are left to lengthen future probes.
  for (size_t next = (hole + 1) & mask; table_.slots[next].entry != nullptr;
       next = (next + 1) & mask) {
    const size_t ideal = home(table_.slots[next].block_key);
    const bool movable = hole <= next ? (ideal <= hole || ideal > next)
                                      : (ideal <= hole && ideal > next);
    if (movable) {
      table_.slots[hole] = table_.slots[next];
      hole = next;
    }
  }
  table_.slots[hole] = Slot{};
  --used_;
}

void BlockIndex::insert(CacheEntry* entry) {
  const unsigned shift = kLevelShift[entry->level];
  const uint64_t last = (entry->end() - 1) >> shift;
  for (uint64_t block = entry->start >> shift; block <= last; ++block) {
    insert_slot(block_key(entry->level, block), entry);
  }
  ++entries_per_level_[entry->level];
}

void BlockIndex::erase(CacheEntry* entry) {
  const unsigned shift = kLevelShift[entry->level];
  const uint64_t last = (entry->end() - 1) >> shift;
  for (uint64_t block = entry->start >> shift; block <= last; ++block) {
    erase_slot(block_key(entry->level, block), entry);
  }
  --entries_per_level_[entry->level];
}

}  // namespace hmr::core
