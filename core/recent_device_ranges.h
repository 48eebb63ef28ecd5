// Per thread, where its last device hits were.  A registration inside one of those ranges is
// asked of the device cache first, before the host cache's probe, which device memory never
// hits (the host cache files only ranges classified as system memory): a device hit then costs
// one cache lookup, not two.  A hint, never an answer: the device hit path still asks the
// runtime whose memory it is and looks the allocation up; a range that no longer serves (its
// memory freed, the address reused by host memory) is forgotten at its first miss, so a stale
// hint costs one runtime question once, and a host hit outside these ranges pays nothing.
//
// Slots follow util/thread_slot.h.  Fields are relaxed atomics so threads sharing a slot do
// not race; a start and an end from two different writers make a wrong hint, which is
// harmless for the reason above.
#pragma once

#include <atomic>
#include <cstdint>

#include "util/thread_slot.h"

namespace hmr::core {

class RecentDeviceRanges {
 public:
  [[gnu::always_inline]] bool contains(ThreadSlot slot, uintptr_t start, uint64_t len) const {
    const Ranges& mine = slots_[slot.index];
    for (int i = 0; i < kPerThread; ++i) {
      const uintptr_t first = mine.start[i].load(std::memory_order_relaxed);
      const uintptr_t end = mine.end[i].load(std::memory_order_relaxed);
      if (start >= first && start < end && len <= end - start) return true;
    }
    return false;
  }
  void remember(ThreadSlot slot, uintptr_t start, uintptr_t end) {
    Ranges& mine = slots_[slot.index];
    for (int i = 0; i < kPerThread; ++i) {
      if (mine.start[i].load(std::memory_order_relaxed) == start &&
          mine.end[i].load(std::memory_order_relaxed) == end) {
        return;
      }
    }
    const unsigned at = mine.next.load(std::memory_order_relaxed) % kPerThread;
    mine.start[at].store(start, std::memory_order_relaxed);
    mine.end[at].store(end, std::memory_order_relaxed);
    mine.next.store(static_cast<uint8_t>(at + 1), std::memory_order_relaxed);
  }
  // Drops every range holding `start` (its device hit just missed).
  void forget(ThreadSlot slot, uintptr_t start) {
    Ranges& mine = slots_[slot.index];
    for (int i = 0; i < kPerThread; ++i) {
      if (start >= mine.start[i].load(std::memory_order_relaxed) &&
          start < mine.end[i].load(std::memory_order_relaxed)) {
        mine.start[i].store(0, std::memory_order_relaxed);
        mine.end[i].store(0, std::memory_order_relaxed);
      }
    }
  }

 private:
  // Two: a transport alternating between a send and a receive buffer on one device.
  static constexpr int kPerThread = 2;
  struct alignas(64) Ranges {
    std::atomic<uintptr_t> start[kPerThread] = {};
    std::atomic<uintptr_t> end[kPerThread] = {};
    std::atomic<uint8_t> next{0};
  };
  Ranges slots_[kThreadSlots];
};

}  // namespace hmr::core
