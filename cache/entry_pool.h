// Storage for cache entries: slabs of entries with a free list, so an entry costs its own
// size (not a malloc chunk's) and a miss rarely calls malloc.  Slabs double from 512 entries
// up to 2 MiB, then stay at 2 MiB: each big slab is one transparent huge page
// (util/page_array.h), so hits among a million entries do not miss the TLB too.
//
// Entries are recycled, never freed, while the pool lives: a reader of the index may hold a
// pointer to an entry that has meanwhile died and been reused, and may count on its `state`
// (cache/cache_entry.h) at any moment.  So the free list runs through `next`, never over
// `state`; allocate() claims an entry with an atomic add, and an entry comes back only after
// its finalization was claimed (CacheEntry::claim_finalization), which left `state` free.  Releasing frees nothing, so it
// is safe anywhere, including under the cache's writer mutex; allocating may call malloc and
// must happen outside it.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "cache/cache_entry.h"
#include "util/page_array.h"

namespace hmr::core {

class CacheEntryPool {
 public:
  CacheEntryPool() = default;
  CacheEntryPool(const CacheEntryPool&) = delete;
  CacheEntryPool& operator=(const CacheEntryPool&) = delete;

  // A reset entry, claimed, with one reference: its caller's.
  CacheEntry* allocate();
  // An entry whose finalization was claimed (CacheEntry::claim_finalization).
  void release(CacheEntry* entry);
  // An entry from allocate() that was never filed: drops the caller's reference too.
  void release_unfiled(CacheEntry* entry);

 private:
  static constexpr size_t kFirstSlabEntries = 512;
  static constexpr size_t kLargestSlabEntries = (size_t{2} << 20) / sizeof(CacheEntry);

  void push(CacheEntry* entry);

  std::mutex mutex_;
  CacheEntry* free_ = nullptr;
  std::vector<PageArray<CacheEntry>> slabs_;
};

}  // namespace hmr::core
