#include "util/thread_slot.h"

#include <atomic>

namespace hmr::thread_slot_detail {

__attribute__((tls_model("initial-exec"))) thread_local unsigned slot_plus_one = 0;

ThreadSlot assign() {
  static std::atomic<unsigned> next{0};
  // Saturates well below overflow: thread 4 billion shares slots like thread 65 does.
  unsigned n = next.fetch_add(1, std::memory_order_relaxed);
  if (n > (1u << 30)) n = kThreadSlots + n % kThreadSlots;
  slot_plus_one = n + 1;
  return ThreadSlot{n % kThreadSlots, n < kThreadSlots};
}

}  // namespace hmr::thread_slot_detail
