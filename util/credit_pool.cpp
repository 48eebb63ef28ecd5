#include "util/credit_pool.h"

#include <algorithm>
#include <thread>

namespace hmr {

void CreditPool::reset(uint64_t limit) {
  asymmetric_fences_ready();
  limit_ = limit;
  pool_.store(static_cast<int64_t>(limit), std::memory_order_relaxed);
  for (Slot& slot : slots_) slot.credits.store(0, std::memory_order_relaxed);
}

bool CreditPool::refill_and_take(std::atomic<int64_t>& credits) {
  int64_t available = pool_.load(std::memory_order_relaxed);
  while (available > 0) {
    const int64_t batch = std::min(available, kBatch);
    if (pool_.compare_exchange_weak(available, available - batch, std::memory_order_relaxed)) {
      // One for the caller, the rest parked in its slot.
      if (batch > 1) credits.fetch_add(batch - 1, std::memory_order_relaxed);
      return true;
    }
  }
  // The pool is dry: pull back what other slots hold spare, then take one if any came back.
  std::lock_guard<std::mutex> lock(reclaim_mutex_);
  // Owners stop using plain stores: after the heavy fence each owner either is visibly busy
  // (we wait for it to finish) or will see the flag.
  for (Slot& slot : slots_) slot.revoked.store(true, std::memory_order_relaxed);
  heavy_fence();
  for (Slot& slot : slots_) {
    while (slot.busy.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    // Negative too: a slot dips below zero while its owner undoes a take that found it
    // empty, and the owner's undo will add the one back to the slot, not to the pool.
    const int64_t parked = slot.credits.exchange(0, std::memory_order_relaxed);
    if (parked != 0) pool_.fetch_add(parked, std::memory_order_relaxed);
  }
  for (Slot& slot : slots_) slot.revoked.store(false, std::memory_order_release);
  available = pool_.load(std::memory_order_relaxed);
  while (available > 0) {
    if (pool_.compare_exchange_weak(available, available - 1, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void CreditPool::return_batch(std::atomic<int64_t>& credits, int64_t seen) {
  // Keep a batch for this thread's next takes; the rest goes where other threads find it.
  while (seen > 2 * kBatch) {
    if (credits.compare_exchange_weak(seen, seen - kBatch, std::memory_order_relaxed)) {
      pool_.fetch_add(kBatch, std::memory_order_relaxed);
      return;
    }
  }
}

uint64_t CreditPool::spare() const {
  int64_t total = pool_.load(std::memory_order_relaxed);
  for (const Slot& slot : slots_) total += slot.credits.load(std::memory_order_relaxed);
  return total > 0 ? static_cast<uint64_t>(total) : 0;
}

}  // namespace hmr
