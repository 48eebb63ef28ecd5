#include "util/fork_generation.h"

#include <pthread.h>
#include <unistd.h>

namespace hmr {

std::atomic<uint64_t> fork_generation_detail::counted{0};

namespace {

void forked_child() { fork_generation_detail::counted.fetch_add(1, std::memory_order_relaxed); }

// Registered when libhmr is loaded.  pthread_atfork fails only for want of memory.
const bool registered = [] { return pthread_atfork(nullptr, nullptr, &forked_child) == 0; }();

}  // namespace

uint64_t fork_generation() {
  // Without the handler (its registration failed, or a static initialiser asks before it
  // ran): the process id, marked so it never equals a counted generation.  Slow, still right.
  if (!registered) return (uint64_t{1} << 63) | static_cast<uint64_t>(getpid());
  return fork_generation_detail::counted.load(std::memory_order_relaxed);
}

}  // namespace hmr
