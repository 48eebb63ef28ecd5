// core::BlockIndex — the registration cache's interval index: entries filed per address block
// at one of four granularities, found by one probe per populated level, erased without
// tombstones, grown by tables made outside the lock; and its slots, which carry what a hit
// needs (range, key tag, references) so that a hit never reads the entry.
#include "cache/block_index.h"

#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

namespace hmr::core {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t k2M = 2ULL << 20;
constexpr uint64_t k1G = 1ULL << 30;
constexpr uint64_t k512G = 512ULL << 30;

CacheKey key_with_access(uint32_t access) {
  CacheKey key;
  key.access = access;
  return key;
}

std::unique_ptr<CacheEntry> make_entry(uintptr_t start, uint64_t length,
                                       CacheKey key = key_with_access(1)) {
  auto entry = std::make_unique<CacheEntry>();
  entry->start = start;
  entry->length = length;
  entry->key = key;
  entry->level = static_cast<uint8_t>(BlockIndex::level_for(start, length));
  return entry;
}

void insert(BlockIndex& index, CacheEntry* entry) { index.insert(entry, KeyTag::of(entry->key)); }

// Grows the index the way the cache does: a table made "outside the lock", then adopted.
void insert_growing(BlockIndex& index, CacheEntry* entry) {
  const size_t capacity = index.capacity_for(BlockIndex::slots_needed(*entry));
  if (capacity != 0) {
    BlockIndex::Table old = index.adopt(BlockIndex::make_table(capacity));
    EXPECT_GT(index.capacity(), old.capacity());
  }
  insert(index, entry);
}

// The entry whose slot hits [start, start+len) with `key`, as the cache looks it up; also
// checks that the slot is the one filing it under the block of `start` at its own level,
// which is where put() will look for it.
CacheEntry* find(const BlockIndex& index, uintptr_t start, uint64_t len, const CacheKey& key) {
  BlockIndex::Slot* slot = index.find(start, len, key, KeyTag::of(key));
  if (slot == nullptr) return nullptr;
  CacheEntry* entry = slot->entry();
  EXPECT_EQ(slot->level(), entry->level);
  EXPECT_EQ(slot->block(), start >> BlockIndex::kLevelShift[entry->level]);
  EXPECT_EQ(slot->entry()->start, entry->start);
  EXPECT_EQ(slot->entry()->end(), entry->end());
  EXPECT_EQ(index.slot_of(entry, entry->level, slot->block()), slot);
  return entry;
}

// The entry's slots, found through its first one.
std::vector<BlockIndex::Slot*> slots_of(const BlockIndex& index, const CacheEntry& entry) {
  std::vector<BlockIndex::Slot*> slots;
  BlockIndex::Slot* first =
      index.slot_of(&entry, entry.level, entry.start >> BlockIndex::kLevelShift[entry.level]);
  if (first == nullptr) return slots;
  EXPECT_EQ(first->delta(), 0u);
  index.for_each_slot_of(*first, [&](BlockIndex::Slot& slot) { slots.push_back(&slot); });
  return slots;
}

std::set<CacheEntry*> overlapping(const BlockIndex& index, uintptr_t start, uintptr_t end) {
  std::set<CacheEntry*> seen;
  index.for_each_overlapping(start, end, [&](CacheEntry* entry) { seen.insert(entry); });
  return seen;
}

// ------------------------------------------------------------------ levels

TEST(BlockIndexLevel, SmallRangesUseThe4KiBLevel) {
  EXPECT_EQ(BlockIndex::level_for(0x10000, 1), 0u);
  EXPECT_EQ(BlockIndex::level_for(0x10000, kPage), 0u);
  EXPECT_EQ(BlockIndex::level_for(0x10000, 8 * kPage), 0u);
  // Eight pages that straddle one more block need nine slots: next level.
  EXPECT_EQ(BlockIndex::level_for(0x10000 + 1, 8 * kPage), 1u);
  EXPECT_EQ(BlockIndex::level_for(0x10000, 8 * kPage + 1), 1u);
  // Two bytes across a page boundary are two blocks, still level 0.
  EXPECT_EQ(BlockIndex::level_for(0x10fff, 2), 0u);
}

TEST(BlockIndexLevel, LargerRangesClimbLevels) {
  EXPECT_EQ(BlockIndex::level_for(0, 8 * k2M), 1u);
  EXPECT_EQ(BlockIndex::level_for(0, 8 * k2M + kPage), 2u);
  EXPECT_EQ(BlockIndex::level_for(0, 8 * k1G), 2u);
  EXPECT_EQ(BlockIndex::level_for(0, 8 * k1G + 1), 3u);
  EXPECT_EQ(BlockIndex::level_for(0, 64 * k512G), 3u);  // the top level takes everything
}

TEST(BlockIndexLevel, MoreThanEightTopLevelBlocksCannotBeFiled) {
  // The block's delta lives in the low bits of the entry pointer: eight blocks at most.
  EXPECT_TRUE(BlockIndex::indexable(0, 8 * k512G));
  EXPECT_FALSE(BlockIndex::indexable(0, 8 * k512G + 1));
  EXPECT_FALSE(BlockIndex::indexable(k512G - 1, 8 * k512G));
  EXPECT_TRUE(BlockIndex::indexable(0x7f0000000000, kPage));
  EXPECT_FALSE(BlockIndex::indexable(0x1000, 0)) << "empty";
  EXPECT_FALSE(BlockIndex::indexable(UINTPTR_MAX - kPage + 2, kPage)) << "wraps around";
  EXPECT_TRUE(BlockIndex::indexable(UINTPTR_MAX - kPage + 1, kPage)) << "ends at the very top";
}

TEST(BlockIndexLevel, SlotsNeededCountsTouchedBlocksAtTheLevel) {
  auto one = make_entry(0x10000, kPage);
  EXPECT_EQ(BlockIndex::slots_needed(*one), 1u);
  auto straddling = make_entry(0x10800, kPage);
  EXPECT_EQ(BlockIndex::slots_needed(*straddling), 2u);
  auto eight = make_entry(0x10000, 8 * kPage);
  EXPECT_EQ(BlockIndex::slots_needed(*eight), 8u);
  auto big = make_entry(k2M, 3 * k2M);
  EXPECT_EQ(big->level, 1u);
  EXPECT_EQ(BlockIndex::slots_needed(*big), 3u);
  for (const auto* entry : {one.get(), straddling.get(), eight.get(), big.get()}) {
    EXPECT_LE(BlockIndex::slots_needed(*entry), BlockIndex::kMaxBlocksPerEntry);
  }
}

// ------------------------------------------------------------------ find

TEST(BlockIndex, FindsContainedRangesWithTheSameKeyOnly) {
  BlockIndex index;
  auto entry = make_entry(0x100000, 4 * kPage);
  insert(index, entry.get());
  EXPECT_EQ(index.slots_used(), 4u);

  EXPECT_EQ(find(index, 0x100000, 4 * kPage, entry->key), entry.get());
  EXPECT_EQ(find(index, 0x100000 + kPage + 17, 100, entry->key), entry.get());
  EXPECT_EQ(find(index, 0x100000 + 4 * kPage - 1, 1, entry->key), entry.get());
  // Not contained: past either end.
  EXPECT_EQ(find(index, 0x100000, 4 * kPage + 1, entry->key), nullptr);
  EXPECT_EQ(find(index, 0x100000 - 1, 2, entry->key), nullptr);
  EXPECT_EQ(find(index, 0x100000 + 4 * kPage, 1, entry->key), nullptr);
  // Another sharing key.
  EXPECT_EQ(find(index, 0x100000, kPage, key_with_access(2)), nullptr);
  CacheKey other_device = entry->key;
  other_device.device = 3;
  EXPECT_EQ(find(index, 0x100000, kPage, other_device), nullptr);
}

TEST(BlockIndex, ExactStartKeysMatchOnlyTheSameStart) {
  BlockIndex index;
  CacheKey exact = key_with_access(1);
  exact.exact_start = true;
  auto entry = make_entry(0x200000, 4 * kPage, exact);
  insert(index, entry.get());
  EXPECT_EQ(find(index, 0x200000, kPage, exact), entry.get());
  EXPECT_EQ(find(index, 0x200000 + kPage, kPage, exact), nullptr);
}

TEST(BlockIndex, FindsAcrossLevels) {
  BlockIndex index;
  auto small = make_entry(0x40000000, kPage);                 // level 0
  auto medium = make_entry(0x80000000, 4 * k2M);              // level 1
  auto large = make_entry(0x100000000, 3 * k1G);              // level 2
  auto huge = make_entry(0x10000000000, 9 * k1G);             // level 3
  ASSERT_EQ(small->level, 0u);
  ASSERT_EQ(medium->level, 1u);
  ASSERT_EQ(large->level, 2u);
  ASSERT_EQ(huge->level, 3u);
  for (auto* entry : {small.get(), medium.get(), large.get(), huge.get()}) insert(index, entry);

  const CacheKey key = key_with_access(1);
  EXPECT_EQ(find(index, 0x40000000, kPage, key), small.get());
  EXPECT_EQ(find(index, 0x80000000 + k2M + 5, kPage, key), medium.get());
  EXPECT_EQ(find(index, 0x100000000 + 2 * k1G, k1G, key), large.get());
  EXPECT_EQ(find(index, 0x10000000000 + 8 * k1G, k1G, key), huge.get());
  EXPECT_EQ(find(index, 0x10000000000 + 8 * k1G, k1G + 1, key), nullptr);
  EXPECT_EQ(find(index, 0x30000000, kPage, key), nullptr);
}

TEST(BlockIndex, OverlappingEntriesAreAllFindable) {
  BlockIndex index;
  auto outer = make_entry(0x300000, 8 * kPage, key_with_access(1));
  auto inner = make_entry(0x300000 + 2 * kPage, kPage, key_with_access(2));
  insert(index, outer.get());
  insert(index, inner.get());
  EXPECT_EQ(find(index, 0x300000 + 2 * kPage, kPage, key_with_access(1)), outer.get());
  EXPECT_EQ(find(index, 0x300000 + 2 * kPage, kPage, key_with_access(2)), inner.get());
  index.erase(outer.get());
  EXPECT_EQ(find(index, 0x300000 + 2 * kPage, kPage, key_with_access(1)), nullptr);
  EXPECT_EQ(find(index, 0x300000 + 2 * kPage, kPage, key_with_access(2)), inner.get());
  index.erase(inner.get());
  EXPECT_EQ(index.slots_used(), 0u);
}

// ------------------------------------------------------------------ growth and erase

TEST(BlockIndex, CapacityForSaysWhenTheTableMustGrow) {
  BlockIndex index;
  const size_t initial = index.capacity();
  ASSERT_GT(initial, 0u);
  EXPECT_EQ(index.capacity_for(1), 0u);
  EXPECT_EQ(index.capacity_for(initial / 4 * 3), 0u) << "a load of 3/4 is allowed";
  EXPECT_EQ(index.capacity_for(initial / 4 * 3 + 1), initial + initial / 2)
      << "the table grows by half (not doubling), to any capacity";
  const size_t needed = index.capacity_for(initial);  // a full table is over any sane load
  EXPECT_EQ(needed, initial + initial / 2);
  // 64 -> 96 -> 144 -> 216 -> 324 -> 486: the first step whose 3/4 holds 256 slots.
  ASSERT_EQ(initial, 64u);
  EXPECT_EQ(index.capacity_for(256), 486u);
  BlockIndex::Table fresh = BlockIndex::make_table(needed);
  EXPECT_EQ(fresh.capacity(), needed);
  for (size_t i = 0; i < fresh.capacity(); ++i) EXPECT_TRUE(fresh.slots()[i].empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fresh.slots()) % sizeof(BlockIndex::Slot), 0u)
      << "slots must not straddle cache lines";
  BlockIndex::Table old = index.adopt(std::move(fresh));
  EXPECT_EQ(old.capacity(), initial);
  EXPECT_EQ(index.capacity(), needed);
  EXPECT_EQ(index.capacity_for(initial), 0u);
}

TEST(BlockIndex, ManyEntriesForceGrowthAndStayFindable) {
  BlockIndex index;
  const size_t initial = index.capacity();
  std::vector<std::unique_ptr<CacheEntry>> entries;
  size_t slots = 0;
  // Pages scattered over several 2 MiB blocks and some multi-page entries, so probe runs
  // cross and collide.
  for (uint64_t i = 0; i < 3000; ++i) {
    const uint64_t pages = 1 + i % 3;
    entries.push_back(make_entry(0x7f0000000000 + i * 4 * kPage, pages * kPage));
    insert_growing(index, entries.back().get());
    slots += BlockIndex::slots_needed(*entries.back());
    ASSERT_EQ(index.slots_used(), slots);
    ASSERT_LE(index.slots_used(), index.capacity() / 4 * 3) << "load above 3/4 after insert";
  }
  EXPECT_GT(index.capacity(), initial);
  for (const auto& entry : entries) {
    EXPECT_EQ(find(index, entry->start, entry->length, entry->key), entry.get());
    EXPECT_EQ(find(index, entry->end() - 1, 1, entry->key), entry.get());
  }
  EXPECT_EQ(find(index, 0x7f0000000000 + 3 * kPage, 1, key_with_access(1)), nullptr);
}

TEST(BlockIndex, BackwardShiftEraseKeepsTheOthersFindable) {
  BlockIndex index;
  std::vector<std::unique_ptr<CacheEntry>> entries;
  // Many entries in few blocks' neighbourhood: long probe runs in a small table.
  for (uint64_t i = 0; i < 40; ++i) {
    entries.push_back(make_entry(0x5000000 + i * kPage, kPage));
    insert_growing(index, entries.back().get());
  }
  // Erase in an order that punches holes in the middle of runs.
  std::vector<size_t> order;
  for (size_t i = 0; i < entries.size(); i += 3) order.push_back(i);
  for (size_t i = 1; i < entries.size(); i += 3) order.push_back(i);
  std::set<size_t> erased;
  for (size_t victim : order) {
    index.erase(entries[victim].get());
    erased.insert(victim);
    for (size_t i = 0; i < entries.size(); ++i) {
      const CacheEntry& entry = *entries[i];
      CacheEntry* found = find(index, entry.start, entry.length, entry.key);
      if (erased.count(i) != 0) {
        ASSERT_EQ(found, nullptr) << "erased entry " << i << " still found";
      } else {
        ASSERT_EQ(found, entries[i].get()) << "entry " << i << " lost after erasing " << victim;
      }
    }
    ASSERT_EQ(index.slots_used(), entries.size() - erased.size());
  }
  // Erasing something never filed (or already erased) changes nothing.
  index.erase(entries[0].get());
  EXPECT_EQ(index.slots_used(), entries.size() - erased.size());
}

TEST(BlockIndex, EraseAndReinsertManyTimesLeavesNoTombstones) {
  BlockIndex index;
  std::vector<std::unique_ptr<CacheEntry>> entries;
  for (uint64_t i = 0; i < 30; ++i) {
    entries.push_back(make_entry(0x9000000 + i * 2 * kPage, kPage));
    insert_growing(index, entries.back().get());
  }
  const size_t capacity = index.capacity();
  for (int round = 0; round < 200; ++round) {
    CacheEntry* entry = entries[static_cast<size_t>(round * 7) % entries.size()].get();
    index.erase(entry);
    ASSERT_EQ(index.capacity_for(1), 0u);
    insert(index, entry);
  }
  EXPECT_EQ(index.capacity(), capacity) << "churn at constant size must not grow the table";
  EXPECT_EQ(index.slots_used(), entries.size());
  for (const auto& entry : entries) {
    EXPECT_EQ(find(index, entry->start, entry->length, entry->key), entry.get());
  }
}

// ------------------------------------------------------------------ overlap walks

TEST(BlockIndex, ForEachOverlappingVisitsExactlyTheOverlappingEntries) {
  BlockIndex index;
  auto a = make_entry(0x600000, 2 * kPage);
  auto b = make_entry(0x600000 + 2 * kPage, kPage);
  auto c = make_entry(0x600000 + 10 * kPage, kPage);
  auto big = make_entry(0x40000000, 5 * k2M);
  for (auto* entry : {a.get(), b.get(), c.get(), big.get()}) insert(index, entry);

  EXPECT_EQ(overlapping(index, 0x600000, 0x600000 + 1), (std::set<CacheEntry*>{a.get()}));
  EXPECT_EQ(overlapping(index, 0x600000 + 2 * kPage - 1, 0x600000 + 2 * kPage + 1),
            (std::set<CacheEntry*>{a.get(), b.get()}));
  // Half-open: touching the end is not overlapping.
  EXPECT_EQ(overlapping(index, 0x600000 + 3 * kPage, 0x600000 + 10 * kPage),
            (std::set<CacheEntry*>{}));
  EXPECT_EQ(overlapping(index, 0x600000 + 11 * kPage, 0x600000 + 12 * kPage),
            (std::set<CacheEntry*>{}));
  EXPECT_EQ(overlapping(index, 0x40000000 + 4 * k2M + kPage, 0x40000000 + 4 * k2M + 2 * kPage),
            (std::set<CacheEntry*>{big.get()}));
  EXPECT_EQ(overlapping(index, 0x600000, 0x600000), (std::set<CacheEntry*>{}));
  EXPECT_EQ(overlapping(index, 0x600100, 0x600000), (std::set<CacheEntry*>{}));
}

TEST(BlockIndex, ForEachOverlappingOverHugeRangesFindsEverything) {
  BlockIndex index;
  std::vector<std::unique_ptr<CacheEntry>> entries;
  // Spread over terabytes, so the walked range spans far more blocks than the table has.
  for (uint64_t i = 0; i < 50; ++i) {
    entries.push_back(make_entry(0x100000000000 + i * 37 * k1G + (i % 5) * kPage,
                                 (1 + i % 4) * kPage));
    insert_growing(index, entries.back().get());
  }
  auto giant = make_entry(0x100000000000 + 2000 * k1G, 6 * k512G);  // 7 top-level blocks
  ASSERT_EQ(giant->level, 3u);
  insert_growing(index, giant.get());

  std::set<CacheEntry*> all;
  for (const auto& entry : entries) all.insert(entry.get());
  all.insert(giant.get());
  EXPECT_EQ(overlapping(index, 0, UINTPTR_MAX), all);

  // Half the entries, by a range that still spans millions of 4 KiB blocks.
  const uintptr_t middle = 0x100000000000 + 25 * 37 * k1G;
  std::set<CacheEntry*> upper = {giant.get()};
  for (size_t i = 25; i < entries.size(); ++i) upper.insert(entries[i].get());
  EXPECT_EQ(overlapping(index, middle, UINTPTR_MAX), upper);
  std::set<CacheEntry*> lower;
  for (size_t i = 0; i < 25; ++i) lower.insert(entries[i].get());
  EXPECT_EQ(overlapping(index, 0x100000000000, middle), lower);

  for (const auto& entry : entries) index.erase(entry.get());
  index.erase(giant.get());
  EXPECT_EQ(index.slots_used(), 0u);
  EXPECT_TRUE(overlapping(index, 0, UINTPTR_MAX).empty());
}

// ------------------------------------------------------------------ key tags

TEST(KeyTag, HostKeysAreEncodedExactly) {
  CacheKey key = key_with_access(HMR_READ | HMR_REMOTE_WRITE);
  EXPECT_TRUE(KeyTag::is_exact(KeyTag::of(key)));
  EXPECT_EQ(KeyTag::of(key), HMR_READ | HMR_REMOTE_WRITE);
  CacheKey exact = key;
  exact.exact_start = true;
  EXPECT_TRUE(KeyTag::is_exact(KeyTag::of(exact)));
  EXPECT_NE(KeyTag::of(exact), KeyTag::of(key));
  EXPECT_NE(KeyTag::of(key_with_access(HMR_READ)), KeyTag::of(key_with_access(HMR_WRITE)));
  EXPECT_EQ(KeyTag::of(key) & KeyTag::kIndexBits, 0u);
}

TEST(KeyTag, AnyOtherKeyIsHashed) {
  CacheKey device = key_with_access(HMR_READ);
  device.device = 1;
  CacheKey allocation = key_with_access(HMR_READ);
  allocation.alloc_id = 42;
  CacheKey iface = key_with_access(HMR_READ);
  iface.iface = 2;
  CacheKey path = key_with_access(HMR_READ);
  path.export_mode = 3;
  for (const CacheKey& key : {device, allocation, iface, path}) {
    const uint32_t tag = KeyTag::of(key);
    EXPECT_FALSE(KeyTag::is_exact(tag));
    EXPECT_EQ(tag & KeyTag::kIndexBits, 0u);
    EXPECT_EQ(KeyTag::of(key), tag) << "a key's tag must not change";
  }
}

// CacheKey::whole (the device hit path's key, built in two registers) lays the fields out as
// the compiler does: were the bit-field or field order other than it assumes, a hit would look
// for a key no entry has (a miss every time) or for another entry's.
TEST(CacheKeyTest, BuiltWholeEqualsBuiltFieldByField) {
  struct Fields {
    uint64_t alloc_id;
    int32_t device;
    uint16_t access;
    uint8_t iface;
    uint8_t export_mode;
    bool exact_start;
  };
  const Fields cases[] = {{0, 0, 0, 0, 0, false},
                          {42, 1, HMR_READ | HMR_REMOTE_WRITE, 1, 2, true},
                          {~0ull, -1, 0xffff, 0xff, 0x7f, true},
                          {1ull << 63, INT32_MIN, 1, 5, 3, false},
                          {0x0123456789abcdefull, 0x7fffffff, 0x8000, 2, 1, true}};
  for (const Fields& f : cases) {
    CacheKey fieldwise;
    fieldwise.alloc_id = f.alloc_id;
    fieldwise.device = f.device;
    fieldwise.access = f.access;
    fieldwise.iface = f.iface;
    fieldwise.export_mode = f.export_mode;
    fieldwise.exact_start = f.exact_start;
    const CacheKey whole =
        CacheKey::whole(f.alloc_id, f.device, f.access, f.iface, f.export_mode, f.exact_start);
    EXPECT_TRUE(whole == fieldwise) << "alloc_id " << f.alloc_id << " device " << f.device;
    EXPECT_EQ(std::memcmp(&whole, &fieldwise, sizeof whole), 0) << "alloc_id " << f.alloc_id;
    EXPECT_EQ(KeyTag::of(whole), KeyTag::of(fieldwise));
  }
}

TEST(BlockIndex, GrowingReadsOnlySlotsAndHitsConfirmTheEntry) {
  BlockIndex index;
  auto entry = make_entry(0x700000, kPage, key_with_access(HMR_READ));
  insert(index, entry.get());
  const CacheKey key = key_with_access(HMR_READ);
  // Scribble on the entry's range: growing the table rehashes from the slots alone, and keeps
  // the entry filed; only a lookup, which confirms the range in the entry, stops finding it.
  const uintptr_t start = entry->start;
  entry->start = 0;
  (void)index.adopt(BlockIndex::make_table(index.capacity() * 4));
  EXPECT_EQ(index.slots_used(), 1u);
  EXPECT_EQ(index.find(0x700000, kPage, key, KeyTag::of(key)), nullptr);
  entry->start = start;
  BlockIndex::Slot* slot = index.find(0x700000, kPage, key, KeyTag::of(key));
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->entry(), entry.get());
  // A key that passes the slot's filter is still compared in full with the entry's.
  entry->key.alloc_id = 7;
  EXPECT_EQ(index.find(0x700000, kPage, key, KeyTag::of(key)), nullptr);
  entry->key.alloc_id = 0;
  index.erase(entry.get());
  EXPECT_EQ(index.slots_used(), 0u);
}

TEST(BlockIndex, HashedTagMatchesAreConfirmedAgainstTheEntryKey) {
  BlockIndex index;
  CacheKey filed = key_with_access(HMR_READ);
  filed.device = 1;
  CacheKey asked = filed;
  asked.device = 2;
  auto entry = make_entry(0x800000, kPage, filed);
  // File it under the other key's tag: what a hash collision between the two would do.
  index.insert(entry.get(), KeyTag::of(asked));
  EXPECT_EQ(index.find(0x800000, kPage, asked, KeyTag::of(asked)), nullptr)
      << "a colliding tag was taken for a key match";
  EXPECT_EQ(index.find(0x800000, kPage, filed, KeyTag::of(filed)), nullptr)
      << "wrong tag, must not match";
  index.erase(entry.get());
  insert(index, entry.get());
  EXPECT_EQ(find(index, 0x800000, kPage, filed), entry.get());
  EXPECT_EQ(find(index, 0x800000, kPage, asked), nullptr);
}

// ------------------------------------------------------------------ the slots of an entry

TEST(BlockIndex, EachBlockOfAnEntryHasASlotWithTheRangeAndItsDelta) {
  BlockIndex index;
  auto entry = make_entry(0x900800, 7 * kPage);  // straddles 8 pages
  ASSERT_EQ(BlockIndex::slots_needed(*entry), 8u);
  insert(index, entry.get());
  const std::vector<BlockIndex::Slot*> slots = slots_of(index, *entry);
  ASSERT_EQ(slots.size(), 8u);
  for (unsigned delta = 0; delta < 8; ++delta) {
    const BlockIndex::Slot& slot = *slots[delta];
    EXPECT_EQ(slot.delta(), delta);
    EXPECT_EQ(slot.entry(), entry.get());
    EXPECT_EQ(slot.entry()->start, entry->start);
    EXPECT_EQ(slot.entry()->end(), entry->end());
    EXPECT_EQ(slot.block(), (entry->start >> 12) + delta);
  }
  // A lookup anywhere in the range goes through that block's slot.
  EXPECT_EQ(index.find(entry->start + 5 * kPage, 10, entry->key, KeyTag::of(entry->key)),
            slots[5]);
}

TEST(BlockIndex, EraseTakesOutEverySlotOfTheEntry) {
  BlockIndex index;
  auto entry = make_entry(0xa00000, 3 * kPage);
  insert(index, entry.get());
  const uint32_t tag = KeyTag::of(entry->key);
  for (uint64_t page = 0; page < 3; ++page) {
    EXPECT_NE(index.find(entry->start + page * kPage, kPage, entry->key, tag), nullptr);
  }
  index.erase(entry.get());
  EXPECT_EQ(index.slots_used(), 0u);
  EXPECT_EQ(index.slot_of(entry.get(), entry->level, entry->start >> 12), nullptr)
      << "no lookup may find the entry once it is out";
  index.erase(entry.get());  // a second erase finds nothing and changes nothing
  EXPECT_EQ(index.slots_used(), 0u);
}

TEST(BlockIndex, EntriesStayFoundThroughGrowthAndErase) {
  BlockIndex index;
  std::vector<std::unique_ptr<CacheEntry>> entries;
  // Filed, then grown several times and thinned out by erases that shift the others back:
  // every survivor must still be found, through its own first slot.
  for (uint64_t i = 0; i < 500; ++i) {
    entries.push_back(make_entry(0x7c0000000000 + i * 3 * kPage, (1 + i % 2) * kPage));
    const size_t capacity = index.capacity_for(BlockIndex::slots_needed(*entries.back()));
    if (capacity != 0) (void)index.adopt(BlockIndex::make_table(capacity));
    insert(index, entries.back().get());
  }
  for (size_t i = 0; i < entries.size(); i += 2) index.erase(entries[i].get());
  for (size_t i = 1; i < entries.size(); i += 2) {
    const CacheEntry& entry = *entries[i];
    BlockIndex::Slot* first = index.slot_of(&entry, entry.level, entry.start >> 12);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->entry(), &entry);
    EXPECT_EQ(first->block(), entry.start >> 12);
    EXPECT_EQ(find(index, entry.start, entry.length, entry.key), &entry);
    index.erase(entries[i].get());
  }
  EXPECT_EQ(index.slots_used(), 0u);
}

TEST(BlockIndex, ProbeRunsWrapAroundTheEndOfTheTable) {
  BlockIndex index;
  const size_t capacity = index.capacity();
  std::vector<std::unique_ptr<CacheEntry>> entries;
  // Three pages homed at the last slot (their run wraps to slots 0 and 1), then other pages up
  // to the maximum load.
  for (uint64_t block = 0x100; entries.size() < 3; ++block) {
    if (index.home(0, block) == capacity - 1) {
      entries.push_back(make_entry(block << 12, kPage));
      insert(index, entries.back().get());
    }
  }
  ASSERT_EQ(index.slot_at(0).entry(), entries[1].get());
  ASSERT_EQ(index.slot_at(1).entry(), entries[2].get());
  for (uint64_t i = 0; index.capacity_for(1) == 0; ++i) {
    entries.push_back(make_entry(0x3000000 + i * 5 * kPage, kPage));
    insert(index, entries.back().get());
  }
  ASSERT_EQ(index.capacity(), capacity);
  for (const auto& entry : entries) {
    ASSERT_EQ(find(index, entry->start, entry->length, entry->key), entry.get());
  }
  // Erase everything, checking the rest after each erase (backward shifts across the end).
  for (size_t victim = 0; victim < entries.size(); ++victim) {
    index.erase(entries[victim].get());
    for (size_t i = victim + 1; i < entries.size(); ++i) {
      const CacheEntry& entry = *entries[i];
      ASSERT_EQ(find(index, entry.start, entry.length, entry.key), &entry)
          << "entry " << i << " lost after erasing " << victim;
    }
  }
  EXPECT_EQ(index.slots_used(), 0u);
}

TEST(BlockIndex, ALevelIsOnlySearchedForItsOwnSlots) {
  // A 2 MiB-level entry at S has the slot (level 1, block (S >> 21) + 2, delta 2).
  // Recomputed with the 4 KiB shift, that slot claims block (S >> 12) + 2, which is where a
  // lookup of R = S + 2 pages probes at level 0.  Build the collision: the level-0 probe run
  // of R must cross that slot (fillers occupy everything in between).  It must not be taken
  // there: put() would then look for the hold under R's 2 MiB block, the entry's first slot.
  BlockIndex index;
  const size_t capacity = index.capacity();
  uintptr_t s = 0;
  size_t first_home = 0, target_home = 0;
  for (uintptr_t candidate = 0x40000000;; candidate += k2M) {
    first_home = index.home(0, (candidate >> 12) + 2);
    target_home = index.home(1, (candidate >> 21) + 2);
    const size_t home0 = index.home(1, candidate >> 21);
    const size_t home1 = index.home(1, (candidate >> 21) + 1);
    const size_t gap = (target_home + capacity - first_home) % capacity;
    const bool apart = home0 != home1 && home0 != target_home && home1 != target_home;
    if (gap >= 1 && gap <= 8 && apart) {
      s = candidate;
      break;
    }
  }
  auto large = make_entry(s, 3 * k2M);
  ASSERT_EQ(large->level, 1u);
  insert(index, large.get());
  ASSERT_EQ(index.slot_at(target_home).entry(), large.get());
  ASSERT_EQ(index.slot_at(target_home).delta(), 2u);
  // Fillers: pages under another key, each homed at one of the slots before that one.
  std::vector<std::unique_ptr<CacheEntry>> fillers;
  for (size_t position = first_home; position != target_home;
       position = (position + 1) % capacity) {
    for (uint64_t block = 0x10;; ++block) {
      if (index.home(0, block) == position) {
        fillers.push_back(make_entry(block << 12, kPage, key_with_access(2)));
        insert(index, fillers.back().get());
        break;
      }
    }
  }
  ASSERT_EQ(index.slot_at(target_home).delta(), 2u) << "fillers moved the large entry's slot";
  // The lookup of R walks the level-0 run into that slot; it must find the entry through its
  // first slot at level 1 (R's 2 MiB block), where put() will look.
  const uintptr_t r = s + 2 * kPage;
  BlockIndex::Slot* slot = index.find(r, kPage, large->key, KeyTag::of(large->key));
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->entry(), large.get());
  EXPECT_EQ(slot->level(), 1u);
  EXPECT_EQ(slot->delta(), 0u);
  EXPECT_EQ(slot, index.slot_of(large.get(), 1, r >> 21));
}

}  // namespace
}  // namespace hmr::core
