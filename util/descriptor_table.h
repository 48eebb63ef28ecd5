// Whether the process's file descriptor table is full: a driver that fails to make a dma-buf
// export (an fd) reports it with a code of its own (the fake CUDA driver, like most, says
// out of memory), so hmr asks the table itself instead of trusting the code.
#pragma once

#include <cstdint>

namespace hmr {

// True when no descriptor can be opened now (EMFILE: the process is at RLIMIT_NOFILE, or
// ENFILE: the system's table is full).  Opens and closes one eventfd to find out: no file
// system is touched.  Another thread may close one a moment later; callers retry on what
// they can observe (their own closes), not on this answer alone.
bool descriptor_table_full();

// The soft RLIMIT_NOFILE (for reasons given to the user), or 0 when it cannot be read.
uint64_t descriptor_limit();

}  // namespace hmr
