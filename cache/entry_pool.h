// Storage for cache entries: slabs of entries with a free list, so an entry costs its own
// size (not a malloc chunk's) and a miss rarely calls malloc.  Slabs double from 512 entries
// up to 2 MiB, then stay at 2 MiB: each big slab is one transparent huge page
// (util/page_array.h), so hits among a million entries do not miss the TLB too.  Slabs go back to the system
// only with the pool.  Releasing an entry frees nothing, so it is safe anywhere, including
// under the cache lock; allocating may call malloc and must happen outside it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "cache/cache_entry.h"
#include "util/page_array.h"

namespace hmr::core {

class CacheEntryPool {
 public:
  CacheEntryPool() = default;
  CacheEntryPool(const CacheEntryPool&) = delete;
  CacheEntryPool& operator=(const CacheEntryPool&) = delete;

  CacheEntry* allocate();
  void release(CacheEntry* entry);

 private:
  union Node {
    Node* next;
    alignas(CacheEntry) unsigned char storage[sizeof(CacheEntry)];
  };
  static constexpr size_t kFirstSlabNodes = 512;
  static constexpr size_t kLargestSlabNodes = (size_t{2} << 20) / sizeof(Node);

  std::mutex mutex_;
  Node* free_ = nullptr;
  std::vector<PageArray<Node>> slabs_;
};

}  // namespace hmr::core
