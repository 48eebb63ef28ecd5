#include "registration/pinned_limit.h"

#include "util/memlock_limit.h"

namespace hmr::core {

PinnedLimit pinned_limit_for(const nic::Capabilities& caps) {
  PinnedLimit limit;
  if (!caps.pins_host_memory) return limit;
  const MemlockLimit memlock = memlock_limit_in_force();
  // (A NIC states no bound as 0; RLIMIT_MEMLOCK of 0 is one: the kernel pins nothing then, and
  // it was taken for none, so hmr said "unlimited" and the NIC refused every registration.)
  if (caps.max_pinned_bytes != 0 &&
      (!memlock.bounded || caps.max_pinned_bytes <= memlock.bytes)) {
    return {true, caps.max_pinned_bytes, "nic"};
  }
  if (memlock.bounded) return {true, memlock.bytes, "rlimit_memlock"};
  return {false, 0, memlock.cap_ipc_lock ? "cap_ipc_lock" : "unlimited"};
}

}  // namespace hmr::core
