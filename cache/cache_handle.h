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
  explicit operator bool() const { return entry != nullptr; }
  nic::Registration registration() const { return entry->registration(); }
  void* desc() const { return hit_desc; }
  uint64_t key_low_u64() const { return hit_key_low; }
};

}  // namespace hmr::core
