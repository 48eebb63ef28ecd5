// Asymmetric fences: a cheap fence for a hot path run by many threads, paired with an
// expensive one for a rare path that must see what the hot path published.
//
// The pattern they serve (Dekker's): a hot thread stores "I am inside" and then reads a flag or
// a pointer; a rare thread changes that flag or pointer and then reads who is inside.  Either
// side needs a store-load fence in between.  With membarrier(2)'s private expedited command
// the rare side runs a full fence on every CPU that runs a thread of this process, so the hot
// side's fence can be a compiler barrier (no instruction at all).  Where membarrier is refused
// (an old kernel, seccomp, valgrind), both sides fall back to an ordinary full fence.
//
// Use light_fence() on the hot side and heavy_fence() on the rare side, in an object created
// after asymmetric_fences_ready() was called (the choice is made once per process, before any
// hot path depends on it, and never changes back).
#pragma once

#include <atomic>

namespace hmr {

namespace asymmetric_fence_detail {
extern std::atomic<bool> expedited;  // membarrier is registered and answers
}  // namespace asymmetric_fence_detail

// Decides, once per process, whether membarrier carries the rare side.  Call it in the
// constructor of anything whose hot path uses light_fence().  Returns the choice.
bool asymmetric_fences_ready();

inline void light_fence() {
  if (__builtin_expect(asymmetric_fence_detail::expedited.load(std::memory_order_relaxed), 1)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// A full fence on this thread and on every CPU running another thread of this process: after
// it, every store another thread made before its light_fence() is visible here, and a thread
// whose light_fence() came later sees every store made here before this call.  Microseconds:
// for rare paths only.
void heavy_fence();

}  // namespace hmr
