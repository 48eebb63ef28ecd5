#include "util/mapped_range.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace hmr::core {
namespace {

TEST(RangeMapped, EveryPageMappedWhateverItsProtection) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* pages = static_cast<char*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  EXPECT_TRUE(range_mapped(pages + 10, 3 * page - 10));  // any start, any length
  ASSERT_EQ(mprotect(pages + page, page, PROT_NONE), 0);
  EXPECT_TRUE(range_mapped(pages, 3 * page)) << "inaccessible is still mapped";

  ASSERT_EQ(munmap(pages + page, page), 0);
  EXPECT_FALSE(range_mapped(pages, 3 * page)) << "a hole in the middle";
  EXPECT_FALSE(range_mapped(pages + page + 100, 1));
  EXPECT_TRUE(range_mapped(pages, page));
  EXPECT_TRUE(range_mapped(pages + 2 * page, page));
  EXPECT_FALSE(range_mapped(pages + page - 1, 2)) << "the last byte of a page and the hole";
  munmap(pages, page);
  munmap(pages + 2 * page, page);
}

// What a forked child inherits of a mapping marked MADV_DONTFORK (as ROCr's libhsakmt marks
// GPU memory): nothing.
TEST(RangeMapped, AMappingMarkedDontforkIsNotMappedInAForkedChild) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* kept = mmap(nullptr, page, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  void* dropped = mmap(nullptr, page, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(kept, MAP_FAILED);
  ASSERT_NE(dropped, MAP_FAILED);
  ASSERT_EQ(madvise(dropped, page, MADV_DONTFORK), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit((range_mapped(kept, page) ? 0 : 1) | (range_mapped(dropped, page) ? 2 : 0));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status) & 1, 0) << "an ordinary mapping is inherited";
  EXPECT_EQ(WEXITSTATUS(status) & 2, 0) << "a MADV_DONTFORK mapping is not";
  EXPECT_TRUE(range_mapped(dropped, page)) << "the parent keeps it";
  munmap(kept, page);
  munmap(dropped, page);
}

}  // namespace
}  // namespace hmr::core
