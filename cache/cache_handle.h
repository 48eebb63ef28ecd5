// What RegistrationCache::get() hands out and put() takes back.
#pragma once

#include <cstdint>

#include "cache/cache_entry.h"

namespace hmr::core {

// A reference to a cached registration, counted in entry->state: put() counts it down with
// one atomic instruction, under no lock, whether the entry is still cached or not.
struct CacheHandle {
  CacheEntry* entry = nullptr;

  explicit operator bool() const { return entry != nullptr; }
  const nic::Registration& registration() const { return entry->registration; }
};

}  // namespace hmr::core
