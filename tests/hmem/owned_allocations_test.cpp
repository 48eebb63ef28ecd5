// OwnedAllocations, the table Neuron and SynapseAI keep of the memory they allocated: lookups by
// any address inside, exact-start removal, and owners freed exactly once, outside the table.
#include "hmem/owned_allocations.h"

#include <gtest/gtest.h>

#include <utility>

namespace hmr::hmem {
namespace {

// Counts its frees, so a test sees when (and how often) the table lets an allocation go.
class CountingOwner {
 public:
  explicit CountingOwner(int* frees) : frees_(frees) {}
  CountingOwner(CountingOwner&& other) noexcept : frees_(std::exchange(other.frees_, nullptr)) {}
  CountingOwner& operator=(CountingOwner&&) = delete;
  ~CountingOwner() {
    if (frees_ != nullptr) ++*frees_;
  }

 private:
  int* frees_;
};

struct Device {
  int index = 0;
};
using Table = OwnedAllocations<CountingOwner, Device>;

TEST(OwnedAllocations, FindsTheAllocationHoldingAnyAddressInside) {
  int frees = 0;
  Table table;
  ASSERT_TRUE(table.add(0x10000, 0x1000, CountingOwner(&frees), Device{3}));
  ASSERT_TRUE(table.add(0x20000, 0x2000, CountingOwner(&frees), Device{4}));

  for (uintptr_t address : {0x10000u, 0x10fffu}) {
    std::optional<Table::Span> span = table.find(address);
    ASSERT_TRUE(span.has_value()) << address;
    EXPECT_EQ(span->base, 0x10000u);
    EXPECT_EQ(span->len, 0x1000u);
    EXPECT_EQ(span->details.index, 3);
  }
  EXPECT_EQ(table.find(0x21fff)->details.index, 4);
  EXPECT_NE(table.find(0x10000)->alloc_id, table.find(0x20000)->alloc_id);
  // Before the first, in the gap, and just past the end: not hmr's.
  EXPECT_FALSE(table.find(0xffff).has_value());
  EXPECT_FALSE(table.find(0x11000).has_value());
  EXPECT_FALSE(table.find(0x22000).has_value());
  EXPECT_EQ(frees, 0);
}

TEST(OwnedAllocations, RefusesASecondAllocationAtALiveAddressAndLeavesItWithTheCaller) {
  int first_frees = 0;
  int second_frees = 0;
  Table table;
  ASSERT_TRUE(table.add(0x10000, 0x1000, CountingOwner(&first_frees), Device{}));
  {
    CountingOwner second(&second_frees);
    EXPECT_FALSE(table.add(0x10000, 0x2000, std::move(second), Device{}));
    EXPECT_EQ(second_frees, 0);  // still the caller's to free
  }
  EXPECT_EQ(second_frees, 1);
  EXPECT_EQ(table.find(0x10000)->len, 0x1000u);
  EXPECT_EQ(first_frees, 0);
}

TEST(OwnedAllocations, TakeHandsTheOwnerOverOnlyForAnExactStart) {
  int frees = 0;
  Table table;
  ASSERT_TRUE(table.add(0x10000, 0x1000, CountingOwner(&frees), Device{}));
  const uint64_t first_id = table.find(0x10000)->alloc_id;

  EXPECT_FALSE(table.take(0x10040).has_value());  // inside, not the start
  EXPECT_EQ(frees, 0);
  {
    std::optional<CountingOwner> owner = table.take(0x10000);
    ASSERT_TRUE(owner.has_value());
    EXPECT_EQ(frees, 0);  // freed by whoever holds it last, not by the table
    EXPECT_FALSE(table.find(0x10000).has_value());
  }
  EXPECT_EQ(frees, 1);
  EXPECT_FALSE(table.take(0x10000).has_value());

  // The same address allocated again is a new allocation to a cache.
  ASSERT_TRUE(table.add(0x10000, 0x1000, CountingOwner(&frees), Device{}));
  EXPECT_NE(table.find(0x10000)->alloc_id, first_id);
}

TEST(OwnedAllocations, ClearAndDestructionFreeEveryAllocationOnce) {
  int frees = 0;
  {
    Table table;
    ASSERT_TRUE(table.add(0x10000, 0x1000, CountingOwner(&frees), Device{}));
    ASSERT_TRUE(table.add(0x20000, 0x1000, CountingOwner(&frees), Device{}));
    table.clear();
    EXPECT_EQ(frees, 2);
    EXPECT_FALSE(table.find(0x10000).has_value());
    ASSERT_TRUE(table.add(0x30000, 0x1000, CountingOwner(&frees), Device{}));
  }
  EXPECT_EQ(frees, 3);
}

}  // namespace
}  // namespace hmr::hmem
