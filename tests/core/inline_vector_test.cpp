// util/inline_vector.h: a registration's segments, one of them without an allocation.
#include "util/inline_vector.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <span>
#include <utility>
#include <vector>

namespace {

using Segments = hmr::InlineVector<iovec, 1>;

iovec segment(size_t i) { return {reinterpret_cast<void*>(0x1000 * (i + 1)), i + 1}; }

void expect_segments(const Segments& segments, size_t count) {
  ASSERT_EQ(segments.size(), count);
  EXPECT_EQ(segments.empty(), count == 0);
  size_t i = 0;
  for (const iovec& each : segments) {
    EXPECT_EQ(each.iov_base, segment(i).iov_base) << i;
    EXPECT_EQ(each.iov_len, segment(i).iov_len) << i;
    ++i;
  }
  const std::span<const iovec> view = segments;
  EXPECT_EQ(view.size(), count);
  EXPECT_EQ(view.data(), segments.data());
}

Segments filled(size_t count) {
  Segments segments;
  for (size_t i = 0; i < count; ++i) segments.push_back(segment(i));
  return segments;
}

TEST(InlineVector, OneElementLivesInsideTheObject) {
  Segments segments;
  expect_segments(segments, 0);
  segments.push_back(segment(0));
  expect_segments(segments, 1);
  const auto* self = reinterpret_cast<const char*>(&segments);
  const auto* data = reinterpret_cast<const char*>(segments.data());
  EXPECT_TRUE(data >= self && data < self + sizeof segments) << "one segment went to the heap";
}

TEST(InlineVector, GrowsToTheHeapAndKeepsEveryElement) {
  Segments segments = filled(256);  // as many as an indirect key may have
  expect_segments(segments, 256);
  segments.clear();
  expect_segments(segments, 0);
  segments.push_back(segment(0));
  expect_segments(segments, 1);
}

TEST(InlineVector, CopiesAndMovesBothFormsAndLeavesTheSourceValid) {
  for (const size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{40}}) {
    SCOPED_TRACE(count);
    const Segments original = filled(count);
    Segments copy(original);
    expect_segments(copy, count);
    expect_segments(original, count);
    Segments assigned = filled(3);
    assigned = original;
    expect_segments(assigned, count);
    Segments moved(std::move(copy));
    expect_segments(moved, count);
    expect_segments(copy, 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
    copy.push_back(segment(0));
    expect_segments(copy, 1);
    Segments move_assigned = filled(5);
    move_assigned = std::move(moved);
    expect_segments(move_assigned, count);
    expect_segments(moved, 0);  // NOLINT(bugprone-use-after-move)
  }
}

TEST(InlineVector, SelfAssignmentChangesNothing) {
  for (const size_t count : {size_t{1}, size_t{9}}) {
    SCOPED_TRACE(count);
    Segments segments = filled(count);
    Segments& same = segments;
    segments = same;
    expect_segments(segments, count);
    segments = std::span<const iovec>(segments.data(), segments.size());
    expect_segments(segments, count);
    segments = std::move(same);
    expect_segments(segments, count);
  }
}

TEST(InlineVector, AssignsFromASpanOrAVector) {
  const std::vector<iovec> source = {segment(0), segment(1), segment(2)};
  Segments segments;
  segments = source;
  expect_segments(segments, 3);
  segments = std::span<const iovec>(source.data(), 1);
  expect_segments(segments, 1);
}

TEST(InlineVector, PushingAnElementOfItsOwnWhileGrowingCopiesItFirst) {
  Segments segments = filled(4);  // heap storage, full: the next push grows it
  segments.push_back(segments[0]);
  ASSERT_EQ(segments.size(), 5u);
  EXPECT_EQ(segments[4].iov_base, segment(0).iov_base);
  EXPECT_EQ(segments[4].iov_len, segment(0).iov_len);
  Segments one = filled(1);  // inline and full
  one.push_back(one[0]);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1].iov_len, segment(0).iov_len);
}

}  // namespace
