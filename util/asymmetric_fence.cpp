#include "util/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

namespace hmr {

namespace asymmetric_fence_detail {
std::atomic<bool> expedited{false};
}  // namespace asymmetric_fence_detail

namespace {

long membarrier(int command) { return syscall(__NR_membarrier, command, 0, 0); }

bool register_expedited() {
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
         membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool asymmetric_fences_ready() {
  // A function-local static: decided once, by the first caller, before it returns to anyone.
  static const bool ready = [] {
    const bool registered = register_expedited();
    asymmetric_fence_detail::expedited.store(registered, std::memory_order_seq_cst);
    return registered;
  }();
  return ready;
}

void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!asymmetric_fence_detail::expedited.load(std::memory_order_relaxed)) return;
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // Registration belongs to the address space; a child forked from a registered process is
  // registered as well, but if the kernel ever forgets, registering again is allowed.
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
    return;
  }
  // Hot paths already rely on this fence; without it their stores may be unseen for a moment.
  // Nothing can replace it now, so say so loudly (never seen on Linux >= 4.14).
  log_message(LogLevel::error,
              "membarrier(PRIVATE_EXPEDITED) failed after it had worked; hit paths may race");
}

}  // namespace hmr
