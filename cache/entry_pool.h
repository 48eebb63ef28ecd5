// Storage for cache entries: slabs of entries with a free list, so an entry costs its own
// size (not a malloc chunk's) and a miss rarely calls malloc.  Slabs go back to the system
// only with the pool.  Releasing an entry frees nothing, so it is safe anywhere, including
// under the cache lock; allocating may call malloc and must happen outside it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "cache/cache_entry.h"

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
  static constexpr size_t kNodesPerSlab = 512;

  std::mutex mutex_;
  Node* free_ = nullptr;
  std::vector<std::unique_ptr<Node[]>> slabs_;
};

}  // namespace hmr::core
