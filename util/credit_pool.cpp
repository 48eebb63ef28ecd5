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

bool CreditPool::take_from_pool(std::atomic<int64_t>& credits) {
  Transfer transfer(*this);
  int64_t available = pool_.load(std::memory_order_seq_cst);
  while (available > 0) {
    const int64_t batch = std::min(available, kBatch);
    if (pool_.compare_exchange_weak(available, available - batch, std::memory_order_seq_cst)) {
      // One for the caller, the rest parked in its slot.
      if (batch > 1) credits.fetch_add(batch - 1, std::memory_order_seq_cst);
      transfer.moved();
      return true;
    }
  }
  return false;
}

bool CreditPool::reclaim_and_take() {
  for (;;) {
    const uint64_t moved = moved_.load(std::memory_order_seq_cst);
    for (Slot& slot : slots_) {
      while (slot.busy.load(std::memory_order_acquire) != 0) std::this_thread::yield();
      // (Never negative since take_shared compares and swaps; an exchange keeps the total
      // whatever the slot held.)
      const int64_t parked = slot.credits.exchange(0, std::memory_order_seq_cst);
      if (parked != 0) pool_.fetch_add(parked, std::memory_order_seq_cst);
    }
    int64_t available = pool_.load(std::memory_order_seq_cst);
    while (available > 0) {
      if (pool_.compare_exchange_weak(available, available - 1, std::memory_order_seq_cst)) {
        return true;
      }
    }
    // Dry after a full scan: every credit is held, unless one was between a slot and the
    // pool while we looked (a batch on its way, started before this read or ended during
    // the scan; a credit given back into a slot already scanned).  Each look again follows
    // another thread's move, so this ends.
    if (moving_.load(std::memory_order_seq_cst) == 0 &&
        moved_.load(std::memory_order_seq_cst) == moved) {
      return false;
    }
    std::this_thread::yield();
  }
}

bool CreditPool::refill_and_take(std::atomic<int64_t>& credits) {
  if (take_from_pool(credits)) return true;
  // The pool is dry: pull back what other slots hold spare, then take one if any came back.
  std::lock_guard<std::mutex> lock(reclaim_mutex_);
  // Owners stop using plain stores until the answer is known: after the heavy fence each
  // owner either is visibly busy (the scan waits for it to finish) or will see the flag, and
  // gives back through give_shared, where a reclaimer sees it.
  for (Slot& slot : slots_) slot.revoked.store(true, std::memory_order_seq_cst);
  heavy_fence();
  const bool taken = reclaim_and_take();
  for (Slot& slot : slots_) slot.revoked.store(false, std::memory_order_release);
  return taken;
}

void CreditPool::return_batch(std::atomic<int64_t>& credits, int64_t seen) {
  // Keep a batch for this thread's next takes; the rest goes where other threads find it.
  Transfer transfer(*this);
  while (seen > 2 * kBatch) {
    if (credits.compare_exchange_weak(seen, seen - kBatch, std::memory_order_seq_cst)) {
      pool_.fetch_add(kBatch, std::memory_order_seq_cst);
      transfer.moved();
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
