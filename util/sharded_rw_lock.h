// A reader-writer lock whose readers never share a cache line: each thread increments a
// counter in its own slot, so the cache hit path takes no exclusive lock and two threads
// hitting at once do not slow each other down.  Writers (insert, invalidate, evict) are rare:
// they raise a flag and wait for the readers already inside to leave.
//
// Readers must not block inside; writers must not allocate, free or unmap while holding it
// (an unmapping thread may wait for a monitor that waits for this lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace hmr::core {

class ShardedRwLock {
 public:
  static constexpr unsigned kSlots = 64;

  // Returns the slot to hand back to unlock_shared().
  unsigned lock_shared() {
    const unsigned slot = thread_slot();
    for (;;) {
      readers_[slot].count.fetch_add(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return slot;
      readers_[slot].count.fetch_sub(1, std::memory_order_release);
      wait_for_writer();
    }
  }
  void unlock_shared(unsigned slot) { readers_[slot].count.fetch_sub(1, std::memory_order_release); }

  void lock();
  void unlock();

 private:
  struct alignas(64) ReaderSlot {
    std::atomic<uint32_t> count{0};
  };
  static unsigned thread_slot();
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
  unsigned slot_;
};

}  // namespace hmr::core
