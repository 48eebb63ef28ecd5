#include "cache/entry_pool.h"

namespace hmr::core {

CacheEntry* CacheEntryPool::allocate() {
  Node* node = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ == nullptr) {
      auto slab = std::make_unique<Node[]>(kNodesPerSlab);
      for (size_t i = 0; i < kNodesPerSlab; ++i) {
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
