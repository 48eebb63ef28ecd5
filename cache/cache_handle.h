// What RegistrationCache::get() hands out and put() takes back.
#pragma once

#include <cstdint>

#include "cache/cache_entry.h"

namespace hmr::core {

// A reference to a cached registration: a shared one, counted in entry->state, or one of the
// owner's, counted in the owner's own table (cache/owner_counts.h).  put() gives it back under no
// lock, whether the entry is still cached or not, on whichever thread.
struct CacheHandle {
  CacheEntry* entry = nullptr;
  bool owned = false;  // counted in OwnerCounts, by entry->owner

  explicit operator bool() const { return entry != nullptr; }
  nic::Registration registration() const { return entry->registration(); }
  // What the hit path hands out, read without building a nic::Registration.
  void* desc() const { return entry->desc; }
  uint64_t key_low_u64() const { return entry->key_low_u64(); }
};

}  // namespace hmr::core
