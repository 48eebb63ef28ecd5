#include "cache/entry_pool.h"

#include <algorithm>
#include <new>

namespace hmr::core {

CacheEntry* CacheEntryPool::allocate() {
  CacheEntry* entry = nullptr;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (free_ == nullptr && pending_count_ >= kRecycleBatch) {
      CacheEntry* batch = pending_;
      pending_ = nullptr;
      pending_count_ = 0;
      lock.unlock();
      readers_.wait_for_readers();  // nobody holds a pointer to these from their last life now
      lock.lock();
      CacheEntry* last = batch;
      while (last->next != nullptr) last = last->next;
      last->next = free_;
      free_ = batch;
    }
    if (free_ == nullptr) grow();
    entry = free_;
    free_ = entry->next;
    // The next miss's entry, into the CPU cache now: entries wait on the free list long after
    // their slab was built (or their last life ended), so the reset() of each would otherwise
    // start with a memory miss.
    if (free_ != nullptr) {
      __builtin_prefetch(free_, 1);
      __builtin_prefetch(reinterpret_cast<const char*>(free_ + 1) - 1, 1);  // its last byte's line
    }
  }
  entry->reset();
  return entry;
}

CacheEntryPool::~CacheEntryPool() {
  for (PageArray<CacheEntry>& slab : slabs_) {
    for (size_t i = 0; i < slab.size(); ++i) slab[i].forget_thread_counts();
  }
}

void CacheEntryPool::grow() {
  const size_t entries = slabs_.empty()
                             ? kFirstSlabEntries
                             : std::min(2 * slabs_.back().size(), kLargestSlabEntries);
  PageArray<CacheEntry> slab(entries);
  // Each entry is built once, here, and lives as long as the pool.  Linked so that allocation
  // walks the slab upwards, the order its pages were touched.
  for (size_t i = entries; i-- > 0;) {
    CacheEntry* fresh = new (&slab[i]) CacheEntry();
    fresh->next = free_;
    free_ = fresh;
  }
  slabs_.push_back(std::move(slab));
}

void CacheEntryPool::release(CacheEntry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry->next = pending_;
  pending_ = entry;
  ++pending_count_;
}

}  // namespace hmr::core
