#include "util/memlock_limit.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr {

bool has_cap_ipc_lock() {
  FILE* status = std::fopen("/proc/self/status", "re");
  if (status == nullptr) return false;
  char line[256];
  bool capable = false;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "CapEff:", 7) != 0) continue;
    const unsigned long long caps = std::strtoull(line + 7, nullptr, 16);
    capable = ((caps >> 14) & 1u) != 0;  // CAP_IPC_LOCK
    break;
  }
  std::fclose(status);
  return capable;
}

MemlockLimit memlock_limit_in_force() {
  MemlockLimit limit;
  rlimit memlock{};
  if (getrlimit(RLIMIT_MEMLOCK, &memlock) != 0) return limit;  // (cannot fail for a valid resource)
  limit.soft = memlock.rlim_cur == RLIM_INFINITY ? UINT64_MAX : memlock.rlim_cur;
  limit.cap_ipc_lock = has_cap_ipc_lock();
  limit.bounded = !limit.cap_ipc_lock && memlock.rlim_cur != RLIM_INFINITY;
  if (limit.bounded) limit.bytes = memlock.rlim_cur;
  return limit;
}

}  // namespace hmr
