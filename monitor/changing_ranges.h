// Address ranges that an application's call is changing right now: marked before a memory
// hook tells the caches and cleared once the call has returned from the kernel.
//
// Why: a hook tells the caches before the syscall, so when the call returns nothing cached
// is of the old memory.  But another thread may register the range between that report and
// the syscall (the old pages), or while the kernel is replacing them, and file the
// registration, to be hit by later registrations of the new memory at the same address.  A
// cache therefore files a registration only if no mark overlapped its range, neither when it
// started (after subscribing to the monitor) nor when it files (RegistrationCache::
// register_and_insert); otherwise it is handed out uncached.  Why both looks suffice:
// - marked before the first look: seen by it, or, if the call ended before it, the
//   registration was made after the syscall (of the new pages);
// - marked after the first look and filed before the report: the report drops it;
// - filed while marked: seen by the second look;
// - filed after the mark was cleared: the report came after the first look, which read the
//   cache's invalidation sequence before it, so the cache sees the invalidation.  (Had the
//   hook found nothing subscribed and not reported, the registration subscribed after the
//   mark was made, and its first look saw the mark: both are sequentially consistent.)
//
// Lock-free, no allocation: hooks run in any thread, under malloc's lock, in signal
// handlers.  A fixed number of slots; when all are taken the overflow count marks every
// address as changing (filing is refused, which costs misses, never correctness).
//
// Invariants (each slot is a seqlock):
// - `state` is (version << 2) | phase, phase free (0), writing (1) or set (2).  Only the
//   thread that moved a slot from free to writing writes its range and moves it to set; only
//   that thread moves it back to free, with the next version.
// - A reader that sees writing, or a version that moved while it read the range, answers
//   "changing": a false yes refuses one filing, a false no could file stale memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hmr::core {

class ChangingRanges {
 public:
  static constexpr size_t kSlots = 32;
  static constexpr size_t kOverflow = kSlots;  // the ticket of a change counted in overflow_

  // Marks [start, end) as changing until end_change(ticket).  Sequentially consistent, so a
  // reader that looks after this returns sees it.
  size_t begin_change(uintptr_t start, uintptr_t end);
  void end_change(size_t ticket);

  // Whether any range marked now overlaps [start, end) (or could: see the invariants).
  bool overlaps(uintptr_t start, uintptr_t end) const;

  // In a forked child, the only thread: marks of the parent's threads that were inside a
  // hook at the fork would never end (their threads do not exist here).
  void forget_all_in_forked_child();

 private:
  static constexpr uint64_t kPhaseMask = 3;
  static constexpr uint64_t kWriting = 1;
  static constexpr uint64_t kSet = 2;
  static constexpr uint64_t kNextVersion = 4;

  struct Slot {
    std::atomic<uint64_t> state{0};
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };
  // Marks begun and not ended, counted before a slot is taken and after it is freed: zero,
  // the usual case, answers a reader with one load.
  std::atomic<uint32_t> active_{0};
  std::atomic<uint32_t> overflow_{0};
  Slot slots_[kSlots];
};

}  // namespace hmr::core
