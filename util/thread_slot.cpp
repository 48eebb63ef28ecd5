#include "util/thread_slot.h"

#include <atomic>

namespace hmr {

ThreadSlot this_thread_slot() {
  static std::atomic<unsigned> next{0};
  // initial-exec: the slot is read on every cache hit, so no __tls_get_addr call.
  __attribute__((tls_model("initial-exec"))) thread_local const ThreadSlot slot = [] {
    const unsigned n = next.fetch_add(1, std::memory_order_relaxed);
    return ThreadSlot{n % kThreadSlots, n < kThreadSlots};
  }();
  return slot;
}

}  // namespace hmr
