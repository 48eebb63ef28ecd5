#include "rocr/rocr_free_watch.h"

#include <algorithm>
#include <utility>

namespace hmr::rocr {

void FreeWatchTable::trampoline(void* ptr, void* table) {
  static_cast<FreeWatchTable*>(table)->deliver(reinterpret_cast<uintptr_t>(ptr));
}

void FreeWatchTable::upsert(Allocation& allocation, FreeCallback on_free, void* context) {
  for (Watcher& watcher : allocation.watchers) {
    if (watcher.context == context) {
      watcher.on_free = on_free;
      return;
    }
  }
  allocation.watchers.push_back(Watcher{on_free, context});
}

bool FreeWatchTable::add_if_registered(uint64_t base, size_t len, FreeCallback on_free,
                                       void* context) {
  std::lock_guard lock(mutex_);
  auto found = allocations_.find(base);
  if (found == allocations_.end() || found->second.registrations == 0) return false;
  found->second.len = len;
  upsert(found->second, on_free, context);
  return true;
}

void FreeWatchTable::add_registered(uint64_t base, size_t len, FreeCallback on_free,
                                    void* context) {
  std::lock_guard lock(mutex_);
  Allocation& allocation = allocations_[base];
  allocation.len = len;
  allocation.registrations++;
  upsert(allocation, on_free, context);
}

void FreeWatchTable::remove(uint64_t base, void* context) {
  std::lock_guard lock(mutex_);
  auto found = allocations_.find(base);
  if (found == allocations_.end()) return;
  std::erase_if(found->second.watchers,
                [context](const Watcher& watcher) { return watcher.context == context; });
}

void FreeWatchTable::deliver(uint64_t base) {
  Allocation freed;
  {
    std::lock_guard lock(mutex_);
    auto found = allocations_.find(base);
    if (found == allocations_.end()) return;
    freed = std::move(found->second);
    allocations_.erase(found);
  }
  for (const Watcher& watcher : freed.watchers) watcher.on_free(watcher.context, base, freed.len);
}

std::vector<std::pair<uint64_t, int>> FreeWatchTable::take_registrations() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<uint64_t, int>> registrations;
  registrations.reserve(allocations_.size());
  for (const auto& [base, allocation] : allocations_) {
    registrations.emplace_back(base, allocation.registrations);
  }
  allocations_.clear();
  return registrations;
}

}  // namespace hmr::rocr
