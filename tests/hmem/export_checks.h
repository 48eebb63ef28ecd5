// Checks every iface's dma-buf export must pass, whatever runtime is behind it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <utility>

#include "hmem/iface.h"
#include "tests/hmem/fd_checks.h"

namespace hmr::testing {

// Exports of [base + 64, +len) hold one fd each while alive and close it when dropped; an
// export of [base, +len) hands its fd on when moved and releases it exactly once.  `base` must
// start memory of `iface` at least len + 64 bytes long.  Callers wrap it in
// ASSERT_NO_FATAL_FAILURE when more checks follow.
inline void expect_exports_leak_no_fd(hmem::Iface& iface, const void* base, size_t len) {
  const int before = open_fd_count();
  for (int i = 0; i < 16; ++i) {
    Result<hmem::DmabufExport> exported =
        iface.export_dmabuf({static_cast<const char*>(base) + 64, len});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    EXPECT_EQ(open_fd_count(), before + 1);
  }
  EXPECT_EQ(open_fd_count(), before);

  Result<hmem::DmabufExport> exported = iface.export_dmabuf({base, len});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  hmem::DmabufExport moved = std::move(*exported);
  EXPECT_FALSE(exported->fd.valid());
  const int fd = moved.fd.release();
  EXPECT_EQ(open_fd_count(), before + 1);
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(open_fd_count(), before);
}

}  // namespace hmr::testing
