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
// The calling thread's slot as the hot path passes it (one 8-byte load, nothing to compute),
// and whether it was assigned yet.  Constant-initialised initial-exec TLS: reached with one
// %fs-relative load, no call and no initialisation guard (constinit tells every TU so).
struct Assigned {
  ThreadSlot slot;
  bool valid;
};
extern constinit __attribute__((tls_model("initial-exec"))) thread_local Assigned assigned;
ThreadSlot assign();
}  // namespace thread_slot_detail

// How many exclusive slots have been handed out so far (owner ids 1..this are in use or were):
// a bound for loops over every thread's own data.
unsigned exclusive_slots_assigned();

inline ThreadSlot this_thread_slot() {
  const thread_slot_detail::Assigned& mine = thread_slot_detail::assigned;
  if (__builtin_expect(mine.valid, 1)) return mine.slot;
  return thread_slot_detail::assign();
}

}  // namespace hmr
