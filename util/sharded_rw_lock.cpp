#include "util/sharded_rw_lock.h"

#include <thread>

namespace hmr::core {

unsigned ShardedRwLock::thread_slot() {
  static std::atomic<unsigned> next_slot{0};
  __attribute__((tls_model("initial-exec"))) thread_local const unsigned slot = next_slot.fetch_add(1, std::memory_order_relaxed) % kSlots;
  return slot;
}

void ShardedRwLock::wait_for_writer() const {
  while (writer_.load(std::memory_order_acquire)) std::this_thread::yield();
}

void ShardedRwLock::lock() {
  writers_.lock();
  writer_.store(true, std::memory_order_seq_cst);
  for (ReaderSlot& slot : readers_) {
    while (slot.count.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
}

void ShardedRwLock::unlock() {
  writer_.store(false, std::memory_order_release);
  writers_.unlock();
}

}  // namespace hmr::core
