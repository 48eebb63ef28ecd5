// Which comms and memory handles are alive.  NCCL hands the plugin back the pointers it was
// given, but a caller with a bug (or a test) may pass a closed comm or another plugin's
// handle: every entry point looks the pointer up here before touching what it points to, so
// such a call is an error with a reason instead of a use after free.
//
// The look-up is on every isend and irecv, so each thread remembers the last object it found
// alive in each set (NCCL's proxy thread passes the same comm and handle again and again):
// a hit is two loads, where the locked hash look-up took two lock round trips.
// Invariant: a remembered answer is used only while the set's removal count (`removals_`) is
// what it was when the answer was found under the lock; every remove() bumps it, under the
// lock, before it returns, so no thread trusts an answer older than the last removal it could
// have seen.  A removal racing with a call that already passed the check is the caller's
// use-after-close, as it was with the lock alone (the lock was released before the use).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace hmr::nccl {

class LiveObjects;

// A thread's last answer from one set (LiveObjects::contains).
struct RememberedLive {
  const LiveObjects* set = nullptr;
  const void* object = nullptr;
  uint64_t removals = 0;
};

class LiveObjects {
 public:
  LiveObjects() : id_(next_id_.fetch_add(1) % kRemembered) {}

  void add(const void* object) {
    std::lock_guard lock(mutex_);
    objects_.insert(object);
  }
  // False when `object` was not alive (already removed, or never added).
  bool remove(const void* object) {
    std::lock_guard lock(mutex_);
    removals_.fetch_add(1, std::memory_order_release);
    return objects_.erase(object) == 1;
  }
  bool contains(const void* object) const {
    RememberedLive& last = remembered_[id_];
    if (last.set == this && last.object == object &&
        last.removals == removals_.load(std::memory_order_acquire)) {
      return true;
    }
    std::lock_guard lock(mutex_);
    if (objects_.count(object) != 1) return false;
    last = RememberedLive{this, object, removals_.load(std::memory_order_relaxed)};
    return true;
  }

 private:
  // One remembered answer per set and thread; the plugin has six sets.
  static constexpr size_t kRemembered = 8;
  static inline std::atomic<size_t> next_id_{0};
  static inline thread_local RememberedLive remembered_[kRemembered];

  const size_t id_;
  mutable std::mutex mutex_;
  std::unordered_set<const void*> objects_;
  std::atomic<uint64_t> removals_{0};
};

}  // namespace hmr::nccl
