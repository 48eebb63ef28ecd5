// A limit shared by many threads (at most `limit` things at once) that a hot path can honour
// without contending: each thread slot (util/thread_slot.h) keeps a few credits in a cache
// line of its own and refills from the shared pool a batch at a time.  What one thread takes
// another may give back; only the total is conserved.
//
// Exactness: take() fails only after pulling every slot's spare credits back to the pool, so
// a limit of N admits N holders.  The one imprecision is a race at the limit itself: credits
// moving between a slot and the pool while another thread reclaims are not seen by it, and
// that thread may be refused although a credit is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "util/thread_slot.h"

namespace hmr {

class CreditPool {
 public:
  // 0: no limit (take() always succeeds and touches nothing).
  explicit CreditPool(uint64_t limit = 0) { reset(limit); }
  CreditPool(const CreditPool&) = delete;
  CreditPool& operator=(const CreditPool&) = delete;

  // Only while nobody holds credits.
  void reset(uint64_t limit);

  bool take() {
    if (limit_ == 0) return true;
    std::atomic<int64_t>& credits = slots_[this_thread_slot().index].credits;
    // One locked add.  A slot may dip below zero for a moment (empty, or a reclaimer took its
    // credits between our add and its exchange); every move is an atomic add or exchange, so
    // the total is conserved whatever the interleaving.
    if (credits.fetch_sub(1, std::memory_order_relaxed) > 0) return true;
    credits.fetch_add(1, std::memory_order_relaxed);
    return refill_and_take(credits);
  }

  void give() {
    if (limit_ == 0) return;
    std::atomic<int64_t>& credits = slots_[this_thread_slot().index].credits;
    const int64_t now = credits.fetch_add(1, std::memory_order_relaxed) + 1;
    if (now > 2 * kBatch) return_batch(credits, now);
  }

  // Credits not held by anyone (in the pool or parked in slots): a moment's view.
  uint64_t spare() const;

 private:
  static constexpr int64_t kBatch = 32;

  bool refill_and_take(std::atomic<int64_t>& credits);
  void return_batch(std::atomic<int64_t>& credits, int64_t seen);

  uint64_t limit_ = 0;
  std::atomic<int64_t> pool_{0};
  std::mutex reclaim_mutex_;  // one reclaimer at a time, so two never hide credits from each other
  struct alignas(64) Slot {
    std::atomic<int64_t> credits{0};
  };
  Slot slots_[kThreadSlots];
};

}  // namespace hmr
