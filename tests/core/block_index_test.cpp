// core::BlockIndex — the registration cache's interval index: entries filed per address block
// at one of four granularities, found by one probe per populated level, erased without
// tombstones, grown by tables made outside the lock.
#include "core/cache/block_index.h"

#include <gtest/gtest.h>

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

// Grows the index the way the cache does: a table made "outside the lock", then adopted.
void insert_growing(BlockIndex& index, CacheEntry* entry) {
  const size_t capacity = index.capacity_for(BlockIndex::slots_needed(*entry));
  if (capacity != 0) {
    BlockIndex::Table old = index.adopt(BlockIndex::make_table(capacity));
    EXPECT_GT(index.capacity(), old.capacity);
  }
  index.insert(entry);
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
  index.insert(entry.get());
  EXPECT_EQ(index.slots_used(), 4u);

  EXPECT_EQ(index.find(0x100000, 4 * kPage, entry->key), entry.get());
  EXPECT_EQ(index.find(0x100000 + kPage + 17, 100, entry->key), entry.get());
  EXPECT_EQ(index.find(0x100000 + 4 * kPage - 1, 1, entry->key), entry.get());
  // Not contained: past either end.
  EXPECT_EQ(index.find(0x100000, 4 * kPage + 1, entry->key), nullptr);
  EXPECT_EQ(index.find(0x100000 - 1, 2, entry->key), nullptr);
  EXPECT_EQ(index.find(0x100000 + 4 * kPage, 1, entry->key), nullptr);
  // Another sharing key.
  EXPECT_EQ(index.find(0x100000, kPage, key_with_access(2)), nullptr);
  CacheKey other_device = entry->key;
  other_device.device = 3;
  EXPECT_EQ(index.find(0x100000, kPage, other_device), nullptr);
}

TEST(BlockIndex, ExactStartKeysMatchOnlyTheSameStart) {
  BlockIndex index;
  CacheKey exact = key_with_access(1);
  exact.exact_start = true;
  auto entry = make_entry(0x200000, 4 * kPage, exact);
  index.insert(entry.get());
  EXPECT_EQ(index.find(0x200000, kPage, exact), entry.get());
  EXPECT_EQ(index.find(0x200000 + kPage, kPage, exact), nullptr);
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
  for (auto* entry : {small.get(), medium.get(), large.get(), huge.get()}) index.insert(entry);

  const CacheKey key = key_with_access(1);
  EXPECT_EQ(index.find(0x40000000, kPage, key), small.get());
  EXPECT_EQ(index.find(0x80000000 + k2M + 5, kPage, key), medium.get());
  EXPECT_EQ(index.find(0x100000000 + 2 * k1G, k1G, key), large.get());
  EXPECT_EQ(index.find(0x10000000000 + 8 * k1G, k1G, key), huge.get());
  EXPECT_EQ(index.find(0x10000000000 + 8 * k1G, k1G + 1, key), nullptr);
  EXPECT_EQ(index.find(0x30000000, kPage, key), nullptr);
}

TEST(BlockIndex, OverlappingEntriesAreAllFindable) {
  BlockIndex index;
  auto outer = make_entry(0x300000, 8 * kPage, key_with_access(1));
  auto inner = make_entry(0x300000 + 2 * kPage, kPage, key_with_access(2));
  index.insert(outer.get());
  index.insert(inner.get());
  EXPECT_EQ(index.find(0x300000 + 2 * kPage, kPage, key_with_access(1)), outer.get());
  EXPECT_EQ(index.find(0x300000 + 2 * kPage, kPage, key_with_access(2)), inner.get());
  index.erase(outer.get());
  EXPECT_EQ(index.find(0x300000 + 2 * kPage, kPage, key_with_access(1)), nullptr);
  EXPECT_EQ(index.find(0x300000 + 2 * kPage, kPage, key_with_access(2)), inner.get());
  index.erase(inner.get());
  EXPECT_EQ(index.slots_used(), 0u);
}

// ------------------------------------------------------------------ growth and erase

TEST(BlockIndex, CapacityForSaysWhenTheTableMustGrow) {
  BlockIndex index;
  const size_t initial = index.capacity();
  ASSERT_GT(initial, 0u);
  EXPECT_EQ(initial & (initial - 1), 0u) << "capacity must be a power of two";
  EXPECT_EQ(index.capacity_for(1), 0u);
  const size_t needed = index.capacity_for(initial);  // a full table is over any sane load
  EXPECT_GT(needed, initial);
  EXPECT_EQ(needed & (needed - 1), 0u);
  BlockIndex::Table fresh = BlockIndex::make_table(needed);
  EXPECT_EQ(fresh.capacity, needed);
  for (size_t i = 0; i < fresh.capacity; ++i) EXPECT_EQ(fresh.slots[i].entry, nullptr);
  BlockIndex::Table old = index.adopt(std::move(fresh));
  EXPECT_EQ(old.capacity, initial);
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
    EXPECT_EQ(index.find(entry->start, entry->length, entry->key), entry.get());
    EXPECT_EQ(index.find(entry->end() - 1, 1, entry->key), entry.get());
  }
  EXPECT_EQ(index.find(0x7f0000000000 + 3 * kPage, 1, key_with_access(1)), nullptr);
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
      CacheEntry* found = index.find(entry.start, entry.length, entry.key);
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
    index.insert(entry);
  }
  EXPECT_EQ(index.capacity(), capacity) << "churn at constant size must not grow the table";
  EXPECT_EQ(index.slots_used(), entries.size());
  for (const auto& entry : entries) {
    EXPECT_EQ(index.find(entry->start, entry->length, entry->key), entry.get());
  }
}

// ------------------------------------------------------------------ overlap walks

TEST(BlockIndex, ForEachOverlappingVisitsExactlyTheOverlappingEntries) {
  BlockIndex index;
  auto a = make_entry(0x600000, 2 * kPage);
  auto b = make_entry(0x600000 + 2 * kPage, kPage);
  auto c = make_entry(0x600000 + 10 * kPage, kPage);
  auto big = make_entry(0x40000000, 5 * k2M);
  for (auto* entry : {a.get(), b.get(), c.get(), big.get()}) index.insert(entry);

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
  auto giant = make_entry(0x100000000000 + 2000 * k1G, 20 * k512G);
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

}  // namespace
}  // namespace hmr::core
