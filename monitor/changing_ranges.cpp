#include "monitor/changing_ranges.h"

namespace hmr::core {

size_t ChangingRanges::begin_change(uintptr_t start, uintptr_t end) {
  active_.fetch_add(1, std::memory_order_seq_cst);
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& slot = slots_[i];
    uint64_t seen = slot.state.load(std::memory_order_relaxed);
    if ((seen & kPhaseMask) != 0) continue;
    if (!slot.state.compare_exchange_strong(seen, seen | kWriting, std::memory_order_seq_cst)) {
      continue;  // another change took it first
    }
    slot.start.store(start, std::memory_order_relaxed);
    slot.end.store(end, std::memory_order_relaxed);
    slot.state.store((seen & ~kPhaseMask) | kSet, std::memory_order_seq_cst);
    return i;
  }
  overflow_.fetch_add(1, std::memory_order_seq_cst);
  return kOverflow;
}

void ChangingRanges::end_change(size_t ticket) {
  if (ticket == kOverflow) {
    overflow_.fetch_sub(1, std::memory_order_seq_cst);
  } else {
    Slot& slot = slots_[ticket];
    const uint64_t seen = slot.state.load(std::memory_order_relaxed);
    slot.state.store((seen & ~kPhaseMask) + kNextVersion, std::memory_order_seq_cst);
  }
  active_.fetch_sub(1, std::memory_order_seq_cst);
}

bool ChangingRanges::overlaps(uintptr_t start, uintptr_t end) const {
  if (active_.load(std::memory_order_seq_cst) == 0) return false;
  if (overflow_.load(std::memory_order_seq_cst) != 0) return true;
  for (const Slot& slot : slots_) {
    const uint64_t before = slot.state.load(std::memory_order_seq_cst);
    const uint64_t phase = before & kPhaseMask;
    if (phase == 0) continue;
    if (phase == kWriting) return true;
    const uintptr_t low = slot.start.load(std::memory_order_relaxed);
    const uintptr_t high = slot.end.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.state.load(std::memory_order_relaxed) != before) return true;  // moved meanwhile
    if (low < end && start < high) return true;
  }
  return false;
}

void ChangingRanges::forget_all_in_forked_child() {
  for (Slot& slot : slots_) {
    const uint64_t seen = slot.state.load(std::memory_order_relaxed);
    if ((seen & kPhaseMask) != 0) slot.state.store((seen & ~kPhaseMask) + kNextVersion);
  }
  overflow_.store(0);
  active_.store(0);
}

}  // namespace hmr::core
