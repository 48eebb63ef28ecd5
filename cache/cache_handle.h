// What RegistrationCache::get() hands out and put() takes back.
#pragma once

#include <cstdint>

#include "cache/cache_entry.h"

namespace hmr::core {

// A reference to a cached registration.  A cached entry's references are counted in the
// index slots, so the handle says which slot this one was taken through: the one filing
// `entry` under the block of `start` (the request's own start) at index level `level`.
// put() finds that slot again — usually still in the CPU cache from get() — without reading
// the entry.  A registration handed out uncached is counted in entry->state (kUnindexed).
struct CacheHandle {
  static constexpr uint8_t kUnindexed = 0xff;

  CacheEntry* entry = nullptr;
  uintptr_t start = 0;
  uint8_t level = kUnindexed;

  explicit operator bool() const { return entry != nullptr; }
  const nic::Registration& registration() const { return entry->registration; }
};

}  // namespace hmr::core
