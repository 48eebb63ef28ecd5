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
// Exactness: take() fails only after pulling every slot's spare credits back to the pool with
// no batch on its way between a slot and the pool meanwhile, so a limit of N admits N holders
// and a thread is refused only when every credit is held.  (A batch in flight — taken from the
// pool and not yet parked, or leaving a slot and not yet in the pool — is invisible to a
// reclaimer's scan; transfers are counted, and a reclaimer that found the pool dry looks again
// while one was under way or ended during its scan.)
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
    give_shared(mine);
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

  // With locked read-modify-writes, safe beside a reclaimer.  A compare-and-swap, never a
  // subtraction undone: a slot that dipped below zero for a moment would hide a credit from
  // a reclaimer's scan.
  bool take_shared(std::atomic<int64_t>& credits) {
    int64_t now = credits.load(std::memory_order_relaxed);
    while (now > 0) {
      if (credits.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) return true;
    }
    return refill_and_take(credits);
  }
  void give_shared(Slot& slot) {
    const int64_t now = slot.credits.fetch_add(1, std::memory_order_seq_cst) + 1;
    // A credit given back while a reclaimer looks may land in a slot it has already scanned:
    // counted as a transfer, so that reclaimer looks again (see reclaim_and_take).
    if (slot.revoked.load(std::memory_order_seq_cst)) {
      moved_.fetch_add(1, std::memory_order_seq_cst);
    }
    if (now > 2 * kBatch) return_batch(slot.credits, now);
  }
  bool refill_and_take(std::atomic<int64_t>& credits);
  bool take_from_pool(std::atomic<int64_t>& credits);
  void return_batch(std::atomic<int64_t>& credits, int64_t seen);
  // Under reclaim_mutex_ with owners revoked: every slot's spare credits moved to the pool,
  // and one taken from there, until a scan finds the pool dry with no credit moving.
  bool reclaim_and_take();

  // Marks a transfer between a slot and the pool as under way for its lifetime; moved() once
  // credits did move.  Sequentially consistent with the reclaimer's reads (see reclaim_and_take).
  class Transfer {
   public:
    explicit Transfer(CreditPool& pool) : pool_(pool) {
      pool_.moving_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~Transfer() {
      if (moved_) pool_.moved_.fetch_add(1, std::memory_order_seq_cst);
      pool_.moving_.fetch_sub(1, std::memory_order_seq_cst);
    }
    Transfer(const Transfer&) = delete;
    Transfer& operator=(const Transfer&) = delete;
    void moved() { moved_ = true; }

   private:
    CreditPool& pool_;
    bool moved_ = false;
  };

  uint64_t limit_ = 0;
  std::atomic<int64_t> pool_{0};
  std::atomic<uint32_t> moving_{0};  // transfers between a slot and the pool under way
  std::atomic<uint64_t> moved_{0};   // transfers that moved credits, ever
  std::mutex reclaim_mutex_;  // one reclaimer at a time, so two never hide credits from each other
  Slot slots_[kThreadSlots];
};

}  // namespace hmr
