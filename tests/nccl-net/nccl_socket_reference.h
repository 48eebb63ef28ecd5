// NCCL's own socket transport (`NCCL_NET=Socket`), driven through the same Net interface as the
// plugin: the reference the plugin is measured against (issue 30's "side by side with NCCL's
// socket transport"), on a machine without a GPU.
//
// libnccl.so does not export its built-in transports; NCCL calls them through internal tables.
// The socket transport's table is the local data symbol `ncclNetSocket` (an ncclNet_t, which
// in NCCL 2.28 has the v11 layout: 22 pointers, `init(ctx, commId, config, log, prof)`), found
// here in the library's ELF symbol table (.symtab, which NVIDIA's build keeps) and relocated by
// the load address (checked to lie in a loaded segment of that library).  Nothing else of
// NCCL is called except ncclGetVersion, to refuse a version whose internal table may have
// another shape, and the CUDA runtime's cudaGetDevice inside it (see the .cpp).  The transport
// needs no GPU: it moves host memory over the kernel's TCP sockets exactly as it does for a
// real NCCL between hosts.  By default (NCCL 2.28's ncclNetSocketGetNsockNthread) that is the
// control socket alone, in the caller's thread; helper threads and extra data sockets come
// only on AWS or GCP NICs or with NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD.
#pragma once

#include <memory>
#include <string>

#include "plugin_under_test.h"

namespace hmr::nccl::test {

// The libnccl.so to load: $HMR_NCCL_LIBRARY if set, else the one CMake found (or "libnccl.so.2",
// found by the dynamic linker's search).
std::string nccl_library_path();

// NCCL's socket transport as a v11 Net, or nullptr and `why` (no libnccl, no symbol table, a
// version whose internal table is not known to be v11, a table of the wrong size or name).
// The library stays loaded for the rest of the process.
std::unique_ptr<Net> open_nccl_socket_transport(std::string* why);

}  // namespace hmr::nccl::test
