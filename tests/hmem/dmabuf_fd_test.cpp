#include "hmem/dmabuf_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "hmem/page_range.h"
#include "tests/hmem/fake_cuda_library.h"

namespace hmr::hmem {
namespace {

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

int open_dev_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(DmabufFd, ClosesOnDestruction) {
  const int fd = open_dev_null();
  { DmabufFd owner(fd); EXPECT_TRUE(owner.valid()); }
  EXPECT_FALSE(is_open(fd));
}

TEST(DmabufFd, ClosesExactlyOnce) {
  // After reset() the number is free and the next open reuses it: a second close by the owner
  // would close that new, unrelated fd.
  const int fd = open_dev_null();
  int reused = -1;
  {
    DmabufFd owner(fd);
    owner.reset();
    EXPECT_FALSE(owner.valid());
    reused = open_dev_null();
    ASSERT_EQ(reused, fd);
  }
  EXPECT_TRUE(is_open(reused));
  ::close(reused);
}

TEST(DmabufFd, MovedFromDoesNotClose) {
  const int before = hmr::testing::open_fd_count();
  const int fd = open_dev_null();
  DmabufFd target;
  {
    DmabufFd source(fd);
    target = std::move(source);
    EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  }
  EXPECT_TRUE(is_open(fd));
  EXPECT_EQ(target.get(), fd);
  target = DmabufFd();
  EXPECT_FALSE(is_open(fd));
  EXPECT_EQ(hmr::testing::open_fd_count(), before);
}

TEST(DmabufFd, ReleaseHandsOwnershipOver) {
  const int fd = open_dev_null();
  int released = -1;
  { DmabufFd owner(fd); released = owner.release(); }
  EXPECT_EQ(released, fd);
  EXPECT_TRUE(is_open(fd));
  ::close(fd);
}

TEST(PageRange, RoundsOutToWholePagesAndKeepsTheOffset) {
  const PageRange r = page_round(0x10000 + 0x123, 0x2000, 0x1000);
  EXPECT_EQ(r.start, 0x10000u);
  EXPECT_EQ(r.length, 0x3000u);
  EXPECT_EQ(r.offset, 0x123u);
  const PageRange aligned = page_round(0x10000, 0x1000, 0x1000);
  EXPECT_EQ(aligned.start, 0x10000u);
  EXPECT_EQ(aligned.length, 0x1000u);
  EXPECT_EQ(aligned.offset, 0u);
}

}  // namespace
}  // namespace hmr::hmem
