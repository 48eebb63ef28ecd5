#include "monitor/uffd_monitor.h"

namespace hmr::core {

UffdMonitor& UffdMonitor::instance() {
  // Never destroyed: caches in static objects may still unsubscribe at exit.
  static UffdMonitor* monitor = new UffdMonitor();
  return *monitor;
}

Status UffdMonitor::start() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (watcher_) return ok_status();
  Result<std::unique_ptr<UffdWatcher>> watcher = UffdWatcher::start(
      pending_counter(), [this](const AddressRangeEvent& change) { on_change(change); },
      "userfaultfd monitor");
  if (!watcher.ok()) return watcher.status();
  watcher_ = std::move(*watcher);
  return ok_status();
}

Status UffdMonitor::subscribe(uintptr_t start, size_t len) {
  if (!watcher_) return make_error(HMR_EINVAL, "userfaultfd monitor is not started");
  const uintptr_t first = start & ~(kBlock - 1);
  const uintptr_t end = start + len;
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  // Whole blocks first, once each: later registrations inside them then split no mapping.
  // A block with holes registers only what is mapped (the kernel skips holes), so this is
  // never relied on for correctness...
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = blocks_[block];
    if (!state.registered) state.registered = watcher_->watch(block, kBlock).ok();
    ++state.references;
  }
  // ...the exact pages are: registering them again is free of splits where the block is
  // registered already, and covers pages mapped into a hole since.
  Status watched = watcher_->watch(start, len);
  if (!watched.ok()) {
    for (uintptr_t block = first; block < end; block += kBlock) --blocks_[block].references;
  }
  return watched;
}

void UffdMonitor::unsubscribe(uintptr_t start, size_t len) {
  const uintptr_t first = start & ~(kBlock - 1);
  const uintptr_t end = start + len;
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  for (uintptr_t block = first; block < end; block += kBlock) {
    auto it = blocks_.find(block);
    if (it == blocks_.end() || it->second.references == 0) continue;
    // Kept registered at zero references (no erase, so nothing is freed under this lock):
    // re-subscribing is then free, and events for it are filtered by the caches.
    --it->second.references;
  }
}

void UffdMonitor::forget_blocks(uintptr_t start, uintptr_t end) {
  // Pages that went away took their registration with them: a new mapping there must be
  // registered again by the next subscriber.
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  auto it = blocks_.upper_bound(start & ~(kBlock - 1));
  if (it != blocks_.begin()) --it;
  for (; it != blocks_.end() && it->first < end; ++it) {
    if (it->first + kBlock > start) it->second.registered = false;
  }
}

void UffdMonitor::on_change(const AddressRangeEvent& change) {
  if (change.kind != AddressRangeEvent::Kind::remove) forget_blocks(change.start, change.end);
  notify(change.start, change.end);
}

}  // namespace hmr::core
