// How much memory this process may pin, as the kernel decides it for RDMA registrations:
// ib_umem_get (drivers/infiniband/core/umem.c) adds the pages it pins to the process's
// pinned_vm and refuses with -ENOMEM past RLIMIT_MEMLOCK (the soft limit) unless the process
// has CAP_IPC_LOCK.  Read when a domain opens (docs/semantics.md, "Under pressure").
#pragma once

#include <cstdint>

namespace hmr {

struct MemlockLimit {
  // Whether the kernel bounds this process's pinning (no: RLIMIT_MEMLOCK is unlimited, or the
  // process has CAP_IPC_LOCK), and the bytes it may pin then: 0 is a bound (ulimit -l 0, where
  // every pin is refused), not the absence of one.
  bool bounded = false;
  uint64_t bytes = 0;
  uint64_t soft = 0;       // RLIMIT_MEMLOCK's soft limit as read (UINT64_MAX: unlimited)
  bool cap_ipc_lock = false;
};

// CAP_IPC_LOCK (bit 14) in this process's effective capability set (/proc/self/status).
bool has_cap_ipc_lock();
MemlockLimit memlock_limit_in_force();

}  // namespace hmr
