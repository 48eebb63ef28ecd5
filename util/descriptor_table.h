// Whether the process's file descriptor table is full: a driver that fails to make a dma-buf
// export (an fd) reports it with a code of its own (the fake CUDA driver, like most, says
// out of memory), so hmr asks the table itself instead of trusting the code.
#pragma once

#include <string>

namespace hmr {

// EMFILE when the process is at its RLIMIT_NOFILE, ENFILE when the system's file table is
// full, 0 when a descriptor could be opened now.  Opens and closes one eventfd to find out
// (no file system is touched): for a moment that takes a slot another thread may have
// wanted, which a caller that counts its own closes must count too (hmem/dmabuf_share.h).
int descriptor_shortage();

// What to tell the user of a shortage descriptor_shortage() reported: which table is full and
// its bound, and how to raise it.
std::string describe_descriptor_shortage(int shortage);

}  // namespace hmr
