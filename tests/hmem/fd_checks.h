// Checks on file descriptors, for tests that an iface leaks none and exports what it says.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstddef>
#include <filesystem>

namespace hmr::testing {

// Entries in /proc/self/fd: equal before and after means no fd leaked.
inline int open_fd_count() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

// The size of what `fd` refers to: for a dma-buf, the length the exporter gave it.
inline size_t fd_size(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return static_cast<size_t>(st.st_size);
}

}  // namespace hmr::testing
