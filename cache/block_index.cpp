#include "cache/block_index.h"

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

bool BlockIndex::indexable(uintptr_t start, uint64_t length) {
  if (length == 0 || start + (length - 1) < start) return false;
  const unsigned top = kLevelShift[kLevels - 1];
  return ((start + (length - 1)) >> top) - (start >> top) < kMaxBlocksPerEntry;
}

size_t BlockIndex::slots_needed(const CacheEntry& entry) {
  const unsigned shift = kLevelShift[entry.level];
  return static_cast<size_t>(((entry.end() - 1) >> shift) - (entry.start >> shift) + 1);
}

size_t BlockIndex::capacity_for(size_t extra_slots) const {
  size_t capacity = table_.capacity();
  while (used_ + extra_slots > max_load(capacity)) capacity += capacity / 2;
  return capacity == table_.capacity() ? 0 : capacity;
}

BlockIndex::Table BlockIndex::make_table(size_t capacity) {
  Table table;
  table.storage = PageArray<Slot>(capacity + 1);
  table.storage[0].meta = capacity;  // the header find_if() reads
  return table;
}

BlockIndex::Table BlockIndex::adopt(Table fresh) {
  // Filled before it is published, so readers see it complete; they may go on probing the
  // old one until the caller's grace period ends.
  Table old = std::exchange(table_, std::move(fresh));
  used_ = 0;
  for (size_t i = 0; i < old.capacity(); ++i) {
    if (!old.slots()[i].empty()) insert_slot(old.slots()[i].copy());
  }
  published_.store(table_.slots(), std::memory_order_release);
  return old;
}

void BlockIndex::insert_slot(const Slot& slot) {
  size_t i = home(slot.level(), slot.block());
  while (!table_.slots()[i].empty()) i = next(i);
  store_slot(table_.slots()[i], slot);
  ++used_;
}

BlockIndex::Slot BlockIndex::erase_slot(const CacheEntry* entry, unsigned level, uint64_t block) {
  Slot* found = slot_of(entry, level, block);
  if (found == nullptr) return Slot{};  // not filed: nothing to erase
  const Slot erased = found->copy();
  size_t hole = static_cast<size_t>(found - table_.slots());
  // Backward-shift deletion: pull later members of the probe run into the hole, so no
  // tombstones are left to lengthen future probes.  (A reader probing meanwhile may miss a
  // member that moves behind it: a false miss, which the cache's full path corrects.)  A member may move back to the hole only
  // if that does not put it before its home (distances are cyclic: probing wraps around).
  auto distance = [this](size_t from, size_t to) {
    return to >= from ? to - from : to + table_.capacity() - from;
  };
  for (size_t i = next(hole); !table_.slots()[i].empty(); i = next(i)) {
    const size_t ideal = home(table_.slots()[i].level(), table_.slots()[i].block());
    if (distance(ideal, i) >= distance(hole, i)) {
      store_slot(table_.slots()[hole], table_.slots()[i].copy());
      hole = i;
    }
  }
  store_slot(table_.slots()[hole], Slot{});
  --used_;
  return erased;
}

void BlockIndex::insert(CacheEntry* entry, uint32_t tag) {
  const unsigned shift = kLevelShift[entry->level];
  const uint64_t first = entry->start >> shift;
  const uint64_t last = (entry->end() - 1) >> shift;
  const uint64_t word =
      reinterpret_cast<uintptr_t>(entry) | filter_of(entry->level, tag) | kFiledRecency;
  // Served from the slot: page-aligned at level 0 (so the slot's block and length give the
  // range), an exact host key, and a key a slot holds whole.
  const uint32_t exact = exact_tag(tag);
  const bool served = entry->level == 0 && (entry->end() - 1) >> kPointerBits == 0 &&
                      entry->start % 4096 == 0 &&
                      entry->length % 4096 == 0 && exact != kNoExactTag &&
                      entry->key_size <= sizeof(uint64_t) && !entry->long_record;
  uint64_t meta = static_cast<uint64_t>(entry->owner) << kOwnerBit;
  if (served) {
    meta |= static_cast<uint64_t>(exact) << kExactTagBit | (last - first) << kBlocksBit | kServedBit;
  }
  for (uint64_t block = first; block <= last; ++block) {
    Slot slot;
    slot.word = word | (block - first);
    slot.meta = meta | (block & kBlockMask);
    slot.desc = entry->desc;
    slot.key_low = entry->key_low;
    insert_slot(slot);
  }
  add_to_level(entry->level, 1);
}

bool BlockIndex::take_recency(Slot& first) {
  bool recent = false;
  for_each_slot_of(first, [&](Slot& slot) {
    // A compare-exchange: hits set these bits beside us.
    uint64_t word = __atomic_load_n(&slot.word, __ATOMIC_RELAXED);
    while ((word & kRecencyMask) != 0 &&
           !__atomic_compare_exchange_n(&slot.word, &word, word - kFiledRecency, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    recent = recent || (word & kRecencyMask) != 0;
  });
  return recent;
}

void BlockIndex::erase(CacheEntry* entry) {
  const unsigned shift = kLevelShift[entry->level];
  const uint64_t last = (entry->end() - 1) >> shift;
  bool filed = false;
  for (uint64_t block = entry->start >> shift; block <= last; ++block) {
    filed = !erase_slot(entry, entry->level, block).empty() || filed;
  }
  if (filed) add_to_level(entry->level, -1);
}

}  // namespace hmr::core
