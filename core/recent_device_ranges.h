// Per thread, its last two device hits of memory whose frees are reported to hmr, and what
// they were: the entry's range and cache key (iface, device, export path, allocation id:
// 0 for ROCr memory, whose entries name no allocation; CUDA's BUFFER_ID).  A hint is trusted
// — the registration served with no question to the runtime (Domain::hit_from_hint) — only
// when this allocation's free is reported (ROCr's deallocation callback registered for it:
// DeviceMonitor::frees_reported; CUDA memory in a process that set HMR_CUDA_FREES_REPORTED,
// whose application reports each free through hmr_mem_invalidate or hmr_mem_free: a report
// to one domain moves the generation for all, DeviceMonitor::distrust_hints) and
// DeviceMonitor::generation() still has the value it had when the hint was taken: every
// reported free moves it, so a trusted hint names an allocation that has not been freed
// since, and a registration still cached under its key is that allocation's (the report
// drops them when it is freed).  Anything else asks the runtime as before, and refreshes the
// hint.  Host hits never look here.
//
// Slots follow util/thread_slot.h.  Fields are relaxed atomics so threads sharing a slot do
// not race; fields from two different writers would make a wrong hint, which is why a shared
// slot's hints are never trusted (Domain::remember_device_hit).
#pragma once

#include <atomic>
#include <cstdint>

#include "util/thread_slot.h"

namespace hmr::core {

class RecentDeviceRanges {
 public:
  // What a device hit was: enough to look its registration up again without the runtime.
  struct Identity {
    uint8_t iface = 0;
    uint8_t export_mode = 0;
    uint32_t device = 0;
    bool frees_reported = false;  // this allocation's free is reported to hmr
    bool any_device = false;      // pinned host memory: a declaration of any device is no contradiction
    uint64_t generation = 0;      // DeviceMonitor::generation() when this was learned
    uint64_t alloc_id = 0;        // the cache key's allocation id (0: none)

    uint64_t packed() const {
      return uint64_t{iface} | uint64_t{export_mode} << 8 | uint64_t{device} << 16 |
             uint64_t{frees_reported} << 48 | uint64_t{any_device} << 49;
    }
    static Identity unpacked(uint64_t bits, uint64_t generation, uint64_t alloc_id) {
      return Identity{static_cast<uint8_t>(bits), static_cast<uint8_t>(bits >> 8),
                      static_cast<uint32_t>(bits >> 16), ((bits >> 48) & 1) != 0,
                      ((bits >> 49) & 1) != 0, generation, alloc_id};
    }
  };

  // Whether [start, +len) lies in one of the thread's ranges; its identity in `found`.
  [[gnu::always_inline]] bool contains(ThreadSlot slot, uintptr_t start, uint64_t len,
                                       Identity* found) const {
    const Ranges& mine = slots_[slot.index];
    for (int i = 0; i < kPerThread; ++i) {
      const uintptr_t first = mine.start[i].load(std::memory_order_relaxed);
      const uintptr_t end = mine.end[i].load(std::memory_order_relaxed);
      if (start >= first && start < end && len <= end - start) {
        *found = Identity::unpacked(mine.identity[i].load(std::memory_order_relaxed),
                                    mine.generation[i].load(std::memory_order_relaxed),
                                    mine.alloc_id[i].load(std::memory_order_relaxed));
        return true;
      }
    }
    return false;
  }
  void remember(ThreadSlot slot, uintptr_t start, uintptr_t end, const Identity& identity) {
    Ranges& mine = slots_[slot.index];
    int at = -1;
    for (int i = 0; i < kPerThread && at < 0; ++i) {
      if (mine.start[i].load(std::memory_order_relaxed) == start &&
          mine.end[i].load(std::memory_order_relaxed) == end) {
        at = i;
      }
    }
    if (at < 0) {
      at = static_cast<int>(mine.next.load(std::memory_order_relaxed) % kPerThread);
      mine.next.store(static_cast<uint8_t>(at + 1), std::memory_order_relaxed);
    }
    // Another range over the same addresses is an older allocation's: it goes, or a lookup
    // would keep finding it first.
    for (int i = 0; i < kPerThread; ++i) {
      if (i != at && mine.start[i].load(std::memory_order_relaxed) < end &&
          start < mine.end[i].load(std::memory_order_relaxed)) {
        mine.start[i].store(0, std::memory_order_relaxed);
        mine.end[i].store(0, std::memory_order_relaxed);
      }
    }
    mine.start[at].store(start, std::memory_order_relaxed);
    mine.end[at].store(end, std::memory_order_relaxed);
    mine.identity[at].store(identity.packed(), std::memory_order_relaxed);
    mine.generation[at].store(identity.generation, std::memory_order_relaxed);
    mine.alloc_id[at].store(identity.alloc_id, std::memory_order_relaxed);
  }
 private:
  // Two: a transport alternating between a send and a receive buffer on one device.
  static constexpr int kPerThread = 2;
  struct alignas(64) Ranges {
    std::atomic<uintptr_t> start[kPerThread] = {};
    std::atomic<uintptr_t> end[kPerThread] = {};
    std::atomic<uint64_t> identity[kPerThread] = {};
    std::atomic<uint64_t> generation[kPerThread] = {};
    std::atomic<uint64_t> alloc_id[kPerThread] = {};
    std::atomic<uint8_t> next{0};
  };
  Ranges slots_[kThreadSlots];
};

}  // namespace hmr::core
