#include "util/sharded_rw_lock.h"

#include <thread>

namespace hmr::core {

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
