#include "cache/entry_pool.h"

#include <algorithm>
#include <new>

namespace hmr::core {

CacheEntry* CacheEntryPool::allocate() {
  CacheEntry* entry = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ == nullptr) {
      const size_t entries =
          slabs_.empty() ? kFirstSlabEntries
                         : std::min(2 * slabs_.back().size(), kLargestSlabEntries);
      PageArray<CacheEntry> slab(entries);
      // Each entry is built once, here, and lives as long as the pool.  Linked so that
      // allocation walks the slab upwards, the order its pages were touched.
      for (size_t i = entries; i-- > 0;) {
        CacheEntry* fresh = new (&slab[i]) CacheEntry();
        fresh->next = free_;
        free_ = fresh;
      }
      slabs_.push_back(std::move(slab));
    }
    entry = free_;
    free_ = entry->next;
  }
  entry->reset();
  // Fields first, then the claim: a stale reader that sees kClaimed without kLive never
  // reads them, and the release of filing (kLive) publishes them.
  entry->state.fetch_add(CacheEntry::kClaimed + 1, std::memory_order_acq_rel);
  return entry;
}

void CacheEntryPool::release(CacheEntry* entry) { push(entry); }

void CacheEntryPool::release_unfiled(CacheEntry* entry) {
  entry->state.fetch_sub(CacheEntry::kClaimed + 1, std::memory_order_acq_rel);
  push(entry);
}

void CacheEntryPool::push(CacheEntry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry->next = free_;
  free_ = entry;
}

}  // namespace hmr::core
