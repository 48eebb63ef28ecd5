// A reader-writer lock whose readers never share a cache line: each thread increments a
// counter in its own slot, so the cache hit path takes no exclusive lock and two threads
// hitting at once do not slow each other down.  A thread that owns its slot outright
// (util/thread_slot.h) leaves with a plain release store: one locked instruction per read
// section instead of two.  Writers (insert, invalidate, evict) are rare:
// they raise a flag and wait for the readers already inside to leave.
//
// Readers must not block inside; writers must not allocate, free or unmap while holding it
// (an unmapping thread may wait for a monitor that waits for this lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "util/thread_slot.h"

namespace hmr::core {

class ShardedRwLock {
 public:
  static constexpr unsigned kSlots = kThreadSlots;

  // Returns the slot to hand back to unlock_shared().
  ThreadSlot lock_shared() {
    const ThreadSlot slot = this_thread_slot();
    std::atomic<uint32_t>& count = readers_[slot.index].count;
    for (;;) {
      // The locked add is also the fence that orders it before the writer flag is read.
      count.fetch_add(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return slot;
      count.fetch_sub(1, std::memory_order_release);
      wait_for_writer();
    }
  }
  void unlock_shared(ThreadSlot slot) {
    std::atomic<uint32_t>& count = readers_[slot.index].count;
    if (slot.exclusive) {
      // Nobody else writes this slot; the writer only reads it.
      count.store(count.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    } else {
      count.fetch_sub(1, std::memory_order_release);
    }
  }

  void lock();
  void unlock();

 private:
  struct alignas(64) ReaderSlot {
    std::atomic<uint32_t> count{0};
  };
  void wait_for_writer() const;

  ReaderSlot readers_[kSlots];
  alignas(64) std::atomic<bool> writer_{false};
  std::mutex writers_;
};

class SharedGuard {
 public:
  explicit SharedGuard(ShardedRwLock& lock) : lock_(lock), slot_(lock.lock_shared()) {}
  ~SharedGuard() { lock_.unlock_shared(slot_); }
  SharedGuard(const SharedGuard&) = delete;
  SharedGuard& operator=(const SharedGuard&) = delete;

 private:
  ShardedRwLock& lock_;
  ThreadSlot slot_;
};

}  // namespace hmr::core
