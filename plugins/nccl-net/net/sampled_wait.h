// How long something has been waiting, measured without a clock read per event: the clock is
// read every `Every` events (a test that found a write pending, an isend that found no buffer),
// from the Every-th on, so the wait counts from a few events after it began and is
// microseconds late at most.  A clock read per message was a measurable part of a small one.
#pragma once

#include <chrono>
#include <cstdint>

namespace hmr::nccl {

template <uint32_t Every>
class SampledWait {
 public:
  using Clock = std::chrono::steady_clock;

  // Counts one more event.  True when the clock was read at it and the wait had begun
  // earlier: then `*waited` says for how long.
  bool count(Clock::duration* waited) {
    if (++events_ % Every != 0) return false;
    const Clock::time_point now = Clock::now();
    if (events_ == Every) {
      since_ = now;
      return false;
    }
    *waited = now - since_;
    return true;
  }
  // The wait is over (the next event starts a new one).
  void reset() { events_ = 0; }

 private:
  uint32_t events_ = 0;
  Clock::time_point since_;
};

}  // namespace hmr::nccl
