// What RegistrationCache::get() hands out and put() takes back.
#pragma once

#include <cstdint>

#include "cache/cache_entry.h"

namespace hmr::core {

// A reference to a cached registration: a shared one, counted in entry->state, or one counted
// in the table of the thread `counted_by` (cache/owner_counts.h).  put() gives it back under
// no lock, whether the entry is still cached or not, on whichever thread.  The descriptor and
// key are what the hit read, from the index slot or the entry: a caller needs them at once,
// and reading them from the entry would cost the miss a slot-served hit saves.
struct CacheHandle {
  CacheEntry* entry = nullptr;
  void* hit_desc = nullptr;
  uint64_t hit_key_low = 0;
  uint8_t counted_by = 0;  // the thread (ThreadSlot::owner_id) whose table counts it; 0: shared

  // A shared reference to `entry`, with its registration's descriptor and key.
  static CacheHandle shared(CacheEntry* entry) {
    return CacheHandle{entry, entry->desc, entry->key_low_u64(), 0};
  }
  // The same handle, its fields read one by one into registers.  A handle just written
  // field by field (8- and 1-byte stores, as the probe fills Hit::handle) and then copied
  // whole is read in 16-byte pieces, which the CPU cannot forward from the narrower stores
  // still in its store buffer: the copy waits for them to drain, about 10 % of a host hit on
  // a Zen 4 guest (perf annotate of try_cached_hit, docs/performance.md).  The empty asm keeps
  // the compiler from merging the reads back into wide ones.
  [[gnu::always_inline]] CacheHandle through_registers() const {
    CacheEntry* e = entry;
    void* desc = hit_desc;
    uint64_t key = hit_key_low;
    uint8_t by = counted_by;
    asm("" : "+r"(e), "+r"(desc), "+r"(key), "+r"(by));
    return CacheHandle{e, desc, key, by};
  }
  explicit operator bool() const { return entry != nullptr; }
  nic::Registration registration() const { return entry->registration(); }
  void* desc() const { return hit_desc; }
  uint64_t key_low_u64() const { return hit_key_low; }
};

}  // namespace hmr::core
