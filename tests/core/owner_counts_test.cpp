// OwnerCounts: an owner's references counted in its own table, per entry; a full table says no
// (the caller then counts a shared reference in the entry); and a count an owner leaves behind
// (offset by a debt in the entry's state) never reaches a later entry at the same address.
#include "cache/owner_counts.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cache/cache_entry.h"
#include "cache/entry_pool.h"
#include "util/read_sections.h"

namespace hmr::core {
namespace {

// Owner ids no thread of this binary runs as while these tests run (tests run one at a time),
// each test leaving its records at 0.
constexpr unsigned kOwner = kThreadSlots - 1;
constexpr unsigned kOtherOwner = kThreadSlots - 2;

TEST(OwnerCounts, CountsPerOwnerAndPerEntry) {
  auto entries = std::make_unique<CacheEntry[]>(2);
  CacheEntry* first = &entries[0];
  CacheEntry* second = &entries[1];
  EXPECT_EQ(OwnerCounts::of(kOwner, first), 0u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, first, 2));
  ASSERT_TRUE(OwnerCounts::set(kOwner, second, 5));
  EXPECT_EQ(OwnerCounts::of(kOwner, first), 2u);
  EXPECT_EQ(OwnerCounts::of(kOwner, second), 5u);
  EXPECT_EQ(OwnerCounts::of(kOtherOwner, first), 0u) << "another owner's table answered";
  EXPECT_EQ(OwnerCounts::of(0, first), 0u) << "owner 0 (none) holds nothing";
  ASSERT_TRUE(OwnerCounts::set(kOwner, first, 0));
  EXPECT_EQ(OwnerCounts::of(kOwner, first), 0u);
  EXPECT_EQ(OwnerCounts::of(kOwner, second), 5u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, second, 0));
}

// Counts one reference on each of `entries` in turn with `count_one` (set() or add()) until
// one is refused; the ones counted before it, and the refused one (nullptr if none was).
struct Filled {
  std::vector<CacheEntry*> counted;
  CacheEntry* refused = nullptr;
};
template <typename CountOne>
Filled fill_until_refused(CacheEntry* entries, size_t count, CountOne count_one) {
  Filled filled;
  for (size_t i = 0; i < count && filled.refused == nullptr; ++i) {
    if (count_one(&entries[i])) {
      filled.counted.push_back(&entries[i]);
    } else {
      filled.refused = &entries[i];
    }
  }
  return filled;
}

TEST(OwnerCounts, AFullPlaceRefusesAndAFreedOneServesAgain) {
  // More entries than the table has records: some pair must fill, and the entry refused there
  // must be served once the records before it are back at 0.
  constexpr size_t kEntries = 4 * OwnerCounts::kRecords;
  auto entries = std::make_unique<CacheEntry[]>(kEntries);
  const auto [counted, refused] = fill_until_refused(
      entries.get(), kEntries, [](CacheEntry* entry) { return OwnerCounts::set(kOwner, entry, 1); });
  ASSERT_NE(refused, nullptr) << "a table of " << OwnerCounts::kRecords << " records took "
                              << counted.size() << " entries";
  EXPECT_LE(counted.size(), OwnerCounts::kRecords);
  EXPECT_EQ(OwnerCounts::of(kOwner, refused), 0u) << "a refused count was recorded";
  for (CacheEntry* entry : counted) EXPECT_EQ(OwnerCounts::of(kOwner, entry), 1u);
  for (CacheEntry* entry : counted) ASSERT_TRUE(OwnerCounts::set(kOwner, entry, 0));
  ASSERT_TRUE(OwnerCounts::set(kOwner, refused, 3));
  EXPECT_EQ(OwnerCounts::of(kOwner, refused), 3u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, refused, 0));
}

TEST(OwnerCounts, ACountAboveTheMaximumIsRefused) {
  CacheEntry entry;
  EXPECT_FALSE(OwnerCounts::set(kOwner, &entry, OwnerCounts::kMaxCount + 1));
  EXPECT_EQ(OwnerCounts::of(kOwner, &entry), 0u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entry, OwnerCounts::kMaxCount));
  EXPECT_EQ(OwnerCounts::of(kOwner, &entry), OwnerCounts::kMaxCount);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entry, 0));
}

TEST(OwnerCounts, AddAndRemoveCountOneAndSayHowMany) {
  auto entries = std::make_unique<CacheEntry[]>(4 * OwnerCounts::kRecords);
  uint32_t before = 99;
  ASSERT_TRUE(OwnerCounts::add(kOwner, &entries[0], before));
  EXPECT_EQ(before, 0u);
  ASSERT_TRUE(OwnerCounts::add(kOwner, &entries[0], before));
  EXPECT_EQ(before, 1u);
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 2u);
  EXPECT_TRUE(OwnerCounts::remove(kOwner, &entries[0]));
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 1u);
  EXPECT_TRUE(OwnerCounts::remove(kOwner, &entries[0]));
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 0u);
  EXPECT_FALSE(OwnerCounts::remove(kOwner, &entries[0])) << "no count left to take off";
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 0u);
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 0u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entries[0], OwnerCounts::kMaxCount));
  EXPECT_FALSE(OwnerCounts::add(kOwner, &entries[0], before)) << "counted past kMaxCount";
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), OwnerCounts::kMaxCount);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entries[0], 0));
  // Where set() finds no place, add() finds none either, and changes nothing.
  const auto [counted, refused] =
      fill_until_refused(&entries[1], 4 * OwnerCounts::kRecords - 1,
                         [&](CacheEntry* entry) { return OwnerCounts::add(kOwner, entry, before); });
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(OwnerCounts::of(kOwner, refused), 0u);
  for (CacheEntry* entry : counted) EXPECT_EQ(OwnerCounts::of(kOwner, entry), 1u);
  for (CacheEntry* entry : counted) ASSERT_TRUE(OwnerCounts::set(kOwner, entry, 0));
}

TEST(OwnerCounts, ForgetDropsALeftoverCountAndNothingElse) {
  auto entries = std::make_unique<CacheEntry[]>(2);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entries[0], 7));
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entries[1], 4));
  OwnerCounts::forget(kOwner, &entries[0]);
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[0]), 0u);
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[1]), 4u);
  OwnerCounts::forget(kOtherOwner, &entries[1]);  // not that owner's: nothing changes
  EXPECT_EQ(OwnerCounts::of(kOwner, &entries[1]), 4u);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entries[1], 0));
}

// An entry recycled by its pool starts its next life with no owner count, whatever its last
// owner left recorded (cache/owner_counts.h, forget).
TEST(OwnerCounts, AResetEntryStartsFromNone) {
  CacheEntry entry;
  entry.owner = static_cast<uint8_t>(kOwner);
  ASSERT_TRUE(OwnerCounts::set(kOwner, &entry, 9));
  entry.reset();
  entry.owner = static_cast<uint8_t>(kOwner);  // the same thread files it again
  EXPECT_EQ(OwnerCounts::of(kOwner, &entry), 0u);
}

// A pool's end forgets its entries' counts: a later pool may build entries at the same
// addresses, and the same thread may own them.
TEST(OwnerCounts, APoolsEndForgetsWhatItsEntriesLeft) {
  ReadSections readers;
  const CacheEntry* address = nullptr;
  {
    CacheEntryPool pool(readers);
    CacheEntry* entry = pool.allocate();
    entry->owner = static_cast<uint8_t>(kOwner);
    ASSERT_TRUE(OwnerCounts::set(kOwner, entry, 6));
    address = entry;
    pool.release(entry);
  }
  EXPECT_EQ(OwnerCounts::of(kOwner, address), 0u)
      << "a count outlived the pool whose entry it counted";
}

}  // namespace
}  // namespace hmr::core
