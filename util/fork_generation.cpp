#include "util/fork_generation.h"

#include <pthread.h>
#include <unistd.h>

namespace hmr::fork_generation_detail {

std::atomic<uint64_t> counted{0};

namespace {
void forked_child() { counted.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

// Registered when libhmr is loaded.  pthread_atfork fails only for want of memory.
const bool counting = [] { return pthread_atfork(nullptr, nullptr, &forked_child) == 0; }();

uint64_t from_process_id() {
  // Without the handler (its registration failed, or a static initialiser asks before it
  // ran): the process id, marked so it never equals a counted generation.  Slow, still right.
  return (uint64_t{1} << 63) | static_cast<uint64_t>(getpid());
}

}  // namespace hmr::fork_generation_detail
