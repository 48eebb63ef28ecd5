// Which of kThreadSlots per-thread slots the calling thread writes to.  The first kThreadSlots
// threads of the process each own one slot outright (`exclusive`): they may update it with
// plain stores, no locked instruction.  Later threads share slots (round robin) and must use
// atomic read-modify-write.  Slots are never handed back: a thread that exits leaves its slot
// unused, which costs memory nobody else uses, never correctness.
#pragma once

namespace hmr {

inline constexpr unsigned kThreadSlots = 64;

struct ThreadSlot {
  unsigned index;
  bool exclusive;

  // 1..kThreadSlots for a thread that owns its slot, 0 for one that shares: names the thread
  // in a byte, for data only one thread may write with plain stores (cache entries' owners).
  unsigned owner_id() const { return exclusive ? index + 1 : 0; }
};

namespace thread_slot_detail {
// The slot number plus one, 0 until the thread first asks.  Zero-initialised initial-exec TLS:
// the hot path reads it with one %fs-relative load, no call and no initialisation guard.
extern __attribute__((tls_model("initial-exec"))) thread_local unsigned slot_plus_one;
ThreadSlot assign();
}  // namespace thread_slot_detail

inline ThreadSlot this_thread_slot() {
  const unsigned n = thread_slot_detail::slot_plus_one;
  if (__builtin_expect(n != 0, 1)) return ThreadSlot{(n - 1) % kThreadSlots, n <= kThreadSlots};
  return thread_slot_detail::assign();
}

}  // namespace hmr
