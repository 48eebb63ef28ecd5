// A limit shared by many threads (at most `limit` things at once) that a hot path can honour
// without contending: each thread slot (util/thread_slot.h) keeps a few credits in a cache
// line of its own and refills from the shared pool a batch at a time.  What one thread takes
// another may give back; only the total is conserved.
//
// No locked instruction on the hot path of a thread that owns its slot: it marks itself busy,
// moves its own count with plain stores, and unmarks itself.  A reclaimer (rare: only when the
// pool is dry) first revokes that right — a flag, then a heavy fence (util/asymmetric_fence.h)
// and a wait for busy owners — and only then takes the slots' credits; owners that see the
// flag use atomic read-modify-writes until it is lowered.  Threads sharing a slot always do.
//
// Exactness: take() fails only after pulling every slot's spare credits back to the pool, so
// a limit of N admits N holders.  The one imprecision is a race at the limit itself: credits
// moving between a slot and the pool while another thread reclaims are not seen by it, and
// that thread may be refused although a credit is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "util/asymmetric_fence.h"
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

  // The calling thread's `slot` may be passed in, by a caller that has it already.
  bool take() { return take(this_thread_slot()); }
  [[gnu::always_inline]] bool take(ThreadSlot slot) {
    if (limit_ == 0) return true;
    Slot& mine = slots_[slot.index];
    if (__builtin_expect(slot.exclusive, 1) && enter_owned(mine)) {
      const int64_t credits = mine.credits.load(std::memory_order_relaxed);
      if (__builtin_expect(credits > 0, 1)) {
        mine.credits.store(credits - 1, std::memory_order_relaxed);
        leave_owned(mine);
        return true;
      }
      leave_owned(mine);
    }
    return take_shared(mine.credits);
  }

  void give() { give(this_thread_slot()); }
  [[gnu::always_inline]] void give(ThreadSlot slot) {
    if (limit_ == 0) return;
    Slot& mine = slots_[slot.index];
    if (__builtin_expect(slot.exclusive, 1) && enter_owned(mine)) {
      const int64_t credits = mine.credits.load(std::memory_order_relaxed);
      if (__builtin_expect(credits < 2 * kBatch, 1)) {
        mine.credits.store(credits + 1, std::memory_order_relaxed);
        leave_owned(mine);
        return;
      }
      leave_owned(mine);
    }
    give_shared(mine.credits);
  }

  // Credits not held by anyone (in the pool or parked in slots): a moment's view.
  uint64_t spare() const;

 private:
  static constexpr int64_t kBatch = 32;

  struct alignas(64) Slot {
    std::atomic<int64_t> credits{0};
    std::atomic<uint32_t> busy{0};      // its owner is moving `credits` with plain stores
    std::atomic<bool> revoked{false};   // a reclaimer is at work: atomics only
  };

  // Whether the owner may move its slot's credits with plain stores now; if so it is marked
  // busy until leave_owned().
  static bool enter_owned(Slot& slot) {
    slot.busy.store(1, std::memory_order_relaxed);
    light_fence();  // busy before revoked is read; the reclaimer's heavy fence is the other half
    if (__builtin_expect(!slot.revoked.load(std::memory_order_relaxed), 1)) return true;
    slot.busy.store(0, std::memory_order_release);
    return false;
  }
  static void leave_owned(Slot& slot) { slot.busy.store(0, std::memory_order_release); }

  // With locked read-modify-writes, safe beside a reclaimer.
  bool take_shared(std::atomic<int64_t>& credits) {
    // A slot may dip below zero for a moment (empty, or a reclaimer took its credits between
    // our add and its exchange); every move is an atomic add or exchange, so the total is
    // conserved whatever the interleaving.
    if (credits.fetch_sub(1, std::memory_order_relaxed) > 0) return true;
    credits.fetch_add(1, std::memory_order_relaxed);
    return refill_and_take(credits);
  }
  void give_shared(std::atomic<int64_t>& credits) {
    const int64_t now = credits.fetch_add(1, std::memory_order_relaxed) + 1;
    if (now > 2 * kBatch) return_batch(credits, now);
  }
  bool refill_and_take(std::atomic<int64_t>& credits);
  void return_batch(std::atomic<int64_t>& credits, int64_t seen);

  uint64_t limit_ = 0;
  std::atomic<int64_t> pool_{0};
  std::mutex reclaim_mutex_;  // one reclaimer at a time, so two never hide credits from each other
  Slot slots_[kThreadSlots];
};

}  // namespace hmr
