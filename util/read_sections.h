// Read sections without locked instructions: readers announce themselves in a slot of their
// own, and a writer that is about to free memory readers may still hold waits until every
// section that could have seen it has ended (a grace period, as in RCU).  Readers never wait
// and never block a writer for long; writers never exclude readers — they change shared data
// so that a reader sees either the old or the new state, and only reclaim after a grace period.
//
// A thread that owns its slot (util/thread_slot.h) enters with a plain store to its slot's
// sequence (odd: inside) and a light fence (util/asymmetric_fence.h: a compiler barrier where
// membarrier works), and leaves with a plain release store (even: outside).  Threads beyond
// kThreadSlots share slots and count themselves in with a locked add instead.
//
// Sections must be short and must not nest.  A child process after fork() starts with every
// section empty (the threads that were inside are not there).
#pragma once

#include <atomic>
#include <cstdint>

#include "util/asymmetric_fence.h"
#include "util/thread_slot.h"

namespace hmr {

class ReadSections {
 public:
  ReadSections();
  ~ReadSections();
  ReadSections(const ReadSections&) = delete;
  ReadSections& operator=(const ReadSections&) = delete;

  // Returns the slot to hand back to leave().
  ThreadSlot enter() {
    const ThreadSlot slot = this_thread_slot();
    enter(slot);
    return slot;
  }
  // The same with the calling thread's slot (this_thread_slot()) passed in.
  void enter(ThreadSlot slot) {
    Slot& mine = slots_[slot.index];
    if (__builtin_expect(slot.exclusive, 1)) {
      mine.sequence.store(mine.sequence.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
      light_fence();  // the store above before the reads of the section
    } else {
      mine.shared.fetch_add(1, std::memory_order_seq_cst);
    }
  }
  void leave(ThreadSlot slot) {
    Slot& mine = slots_[slot.index];
    if (__builtin_expect(slot.exclusive, 1)) {
      mine.sequence.store(mine.sequence.load(std::memory_order_relaxed) + 1,
                          std::memory_order_release);
    } else {
      mine.shared.fetch_sub(1, std::memory_order_release);
    }
  }

  // Returns once every read section that began before the call has ended: memory unlinked
  // before the call may then be freed.  Microseconds (a membarrier); never call it inside a
  // section.
  void wait_for_readers();

  // In a child after fork(): the threads that were inside do not exist there.  Called by the
  // fork handler for every ReadSections of the process.
  void forget_readers();

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> sequence{0};  // odd while its owner is inside
    std::atomic<uint32_t> shared{0};    // threads sharing the slot that are inside
  };
  Slot slots_[kThreadSlots];
};

class ReadSection {
 public:
  explicit ReadSection(ReadSections& sections) : sections_(sections), slot_(sections.enter()) {}
  ReadSection(ReadSections& sections, ThreadSlot slot) : sections_(sections), slot_(slot) {
    sections.enter(slot);
  }
  ~ReadSection() { sections_.leave(slot_); }
  ReadSection(const ReadSection&) = delete;
  ReadSection& operator=(const ReadSection&) = delete;

  // The calling thread's slot, as enter() found it: saves the hot path asking again.
  ThreadSlot slot() const { return slot_; }

 private:
  ReadSections& sections_;
  ThreadSlot slot_;
};

}  // namespace hmr
