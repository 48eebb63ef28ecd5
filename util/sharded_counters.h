// Counters that each thread adds to in a cache line of its own and that are summed when read,
// so counting on a hot path neither contends nor takes a locked instruction (for the threads
// that own their slot; see util/thread_slot.h).  Values are signed: what one thread opens
// another may close, and only the sum has a meaning.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "util/thread_slot.h"

namespace hmr {

template <size_t N>
class ShardedCounters {
 public:
  void add(size_t counter, int64_t delta) { add(this_thread_slot(), counter, delta); }
  // The same, with the calling thread's slot passed in by a caller that has it already.
  void add(ThreadSlot slot, size_t counter, int64_t delta) {
    std::atomic<int64_t>& value = shards_[slot.index].values[counter];
    if (slot.exclusive) {
      value.store(value.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    } else {
      value.fetch_add(delta, std::memory_order_relaxed);
    }
  }
  // A moment's sum: exact once the adding threads have stopped (or synchronised with us).
  int64_t sum(size_t counter) const {
    int64_t total = 0;
    for (const Shard& shard : shards_) total += shard.values[counter].load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Shard {
    std::atomic<int64_t> values[N] = {};
  };
  Shard shards_[kThreadSlots];
};

}  // namespace hmr
