#include "cache/entry_pool.h"

#include <algorithm>

namespace hmr::core {

CacheEntry* CacheEntryPool::allocate() {
  Node* node = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ == nullptr) {
      const size_t nodes =
          slabs_.empty() ? kFirstSlabNodes
                         : std::min(2 * slabs_.back().size(), kLargestSlabNodes);
      PageArray<Node> slab(nodes);
      // Linked so that allocation walks the slab upwards, the order its pages were touched.
      for (size_t i = nodes; i-- > 0;) {
        slab[i].next = free_;
        free_ = &slab[i];
      }
      slabs_.push_back(std::move(slab));
    }
    node = free_;
    free_ = node->next;
  }
  return new (node->storage) CacheEntry();
}

void CacheEntryPool::release(CacheEntry* entry) {
  entry->~CacheEntry();
  Node* node = reinterpret_cast<Node*>(entry);
  std::lock_guard<std::mutex> lock(mutex_);
  node->next = free_;
  free_ = node;
}

}  // namespace hmr::core
