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
};

ThreadSlot this_thread_slot();

}  // namespace hmr
