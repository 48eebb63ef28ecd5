#include "util/thread_slot.h"

#include <atomic>

namespace hmr::thread_slot_detail {

constinit __attribute__((tls_model("initial-exec"))) thread_local Assigned assigned = {{0, false}, false};

namespace {
std::atomic<unsigned> next{0};
}  // namespace

ThreadSlot assign() {
  // Saturates well below overflow: thread 4 billion shares slots like thread 65 does.
  unsigned n = next.fetch_add(1, std::memory_order_relaxed);
  if (n > (1u << 30)) n = kThreadSlots + n % kThreadSlots;
  assigned.slot = ThreadSlot{n % kThreadSlots, n < kThreadSlots};
  assigned.valid = true;
  return assigned.slot;
}

}  // namespace hmr::thread_slot_detail

namespace hmr {

unsigned exclusive_slots_assigned() {
  const unsigned assigned = thread_slot_detail::next.load(std::memory_order_acquire);
  return assigned < kThreadSlots ? assigned : kThreadSlots;
}

}  // namespace hmr
