#include "rocr/rocr_free_watch.h"

#include <algorithm>
#include <new>
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

uint64_t FreeWatchTable::add_pending(uint64_t base, size_t len, FreeCallback on_free,
                                     void* context) {
  std::lock_guard lock(mutex_);
  Allocation& allocation = allocations_[base];
  if (allocation.token == 0) allocation.token = ++next_token_;
  allocation.len = len;
  allocation.pending++;
  upsert(allocation, on_free, context);
  return allocation.token;
}

bool FreeWatchTable::confirm(uint64_t base, uint64_t token) {
  std::lock_guard lock(mutex_);
  auto found = allocations_.find(base);
  if (found == allocations_.end() || found->second.token != token) return false;  // freed
  found->second.pending--;
  found->second.registrations++;
  return true;
}

void FreeWatchTable::abandon(uint64_t base, uint64_t token, void* context) {
  std::lock_guard lock(mutex_);
  auto found = allocations_.find(base);
  if (found == allocations_.end() || found->second.token != token) return;  // freed meanwhile
  Allocation& allocation = found->second;
  allocation.pending--;
  // The watcher stays where another registration (made, or being made) can deliver to it.
  if (allocation.registrations > 0 || allocation.pending > 0) return;
  std::erase_if(allocation.watchers,
                [context](const Watcher& watcher) { return watcher.context == context; });
  if (allocation.watchers.empty()) allocations_.erase(found);
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
    registrations.emplace_back(base, allocation.registrations + allocation.pending);
  }
  allocations_.clear();
  return registrations;
}

namespace {

struct KeptTables {
  std::mutex mutex;
  std::vector<std::unique_ptr<FreeWatchTable>> tables;
};

// Never destroyed: a runtime callback may come during the process's exit.
KeptTables& kept_tables() {
  static KeptTables* const kept = new KeptTables;
  return *kept;
}

}  // namespace

void FreeWatchTable::keep_for_late_callbacks(std::unique_ptr<FreeWatchTable> table) {
  if (table == nullptr) return;
  KeptTables& kept = kept_tables();
  std::lock_guard lock(kept.mutex);
  try {
    kept.tables.push_back(std::move(table));
  } catch (const std::bad_alloc&) {
    (void)table.release();  // unreachable then, but never freed under a runtime's callback
  }
}

}  // namespace hmr::rocr
