#include "registration/pinned_limit.h"

#include "util/memlock_limit.h"

namespace hmr::core {

PinnedLimit pinned_limit_for(const nic::Capabilities& caps) {
  PinnedLimit limit;
  if (!caps.pins_host_memory) return limit;
  const MemlockLimit memlock = memlock_limit_in_force();
  if (caps.max_pinned_bytes != 0 &&
      (memlock.bytes == 0 || caps.max_pinned_bytes <= memlock.bytes)) {
    return {caps.max_pinned_bytes, "nic"};
  }
  if (memlock.bytes != 0) return {memlock.bytes, "rlimit_memlock"};
  return {0, memlock.cap_ipc_lock ? "cap_ipc_lock" : "unlimited"};
}

}  // namespace hmr::core
