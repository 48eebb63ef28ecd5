// An answer a device runtime did not give when it was first asked (a refused query at init), so
// that it is asked again later — on the next allocation, export or lookup that needs it — until
// the runtime answers; from then on it is read without a lock.
//
// Why not a mutex beside a value and a `known` flag: the questions are asked on registration
// misses and capability queries from many threads, and once the answer is known (almost
// always, at init) a lock per question only serialises readers.  Why not ask once and keep a
// failure: a transient refusal at init would disable the feature for the process's life.
//
// Use: `if (const T* known = answer.get()) use(*known); else { ask the runtime (no lock held);
// if it answered, answer.keep(value); use(value); }`.  Threads that ask together each get an
// answer; the first to keep one wins and the others use their own (a runtime's answers to the
// same question agree).
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace hmr {

template <class T>
class RetriedAnswer {
 public:
  RetriedAnswer() = default;

  // An answer known from the start (init asked and the runtime answered).
  static RetriedAnswer known(T value) {
    RetriedAnswer answer;
    answer.value_ = std::move(value);
    answer.state_.store(State::known, std::memory_order_relaxed);
    return answer;
  }

  // Moves happen while the owner is being built, before any other thread can see it (init
  // fills a topology, then publishes it): nothing here is shared yet, so relaxed is enough.
  RetriedAnswer(RetriedAnswer&& other) noexcept
      : value_(std::move(other.value_)), state_(other.state_.load(std::memory_order_relaxed)) {}
  RetriedAnswer& operator=(RetriedAnswer&& other) noexcept {
    value_ = std::move(other.value_);
    state_.store(other.state_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  RetriedAnswer(const RetriedAnswer&) = delete;
  RetriedAnswer& operator=(const RetriedAnswer&) = delete;

  // The kept answer, or nullptr while none is.  The pointee never changes once returned.
  const T* get() const noexcept {
    return state_.load(std::memory_order_acquire) == State::known ? &value_ : nullptr;
  }

  // Keeps `value` unless an answer is kept already or another thread is keeping one.  Returns
  // whether this call's value is the one kept.
  bool keep(const T& value) {
    State expected = State::unknown;
    if (!state_.compare_exchange_strong(expected, State::keeping, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      return false;
    }
    value_ = value;
    state_.store(State::known, std::memory_order_release);
    return true;
  }

 private:
  // Invariants: state_ only moves forward, unknown -> keeping -> known.  value_ is written
  // only by the one thread that moved state_ to `keeping`, and only before it stores `known`
  // (release); a reader touches value_ only after loading `known` (acquire), so it sees the
  // whole write and no later one.  A fork while a thread is between the two leaves the child's
  // copy at `keeping` for good: the child then asks the runtime each time (slower, never wrong).
  enum class State : uint8_t { unknown, keeping, known };
  T value_{};
  std::atomic<State> state_{State::unknown};
};

}  // namespace hmr
