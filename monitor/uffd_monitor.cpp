#include "monitor/uffd_monitor.h"

#include <algorithm>
#include <cstdint>

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
      "userfaultfd monitor", /*know_watched=*/true);
  if (!watcher.ok()) return watcher.status();
  watcher_ = std::move(*watcher);
  return ok_status();
}

bool UffdMonitor::Block::knows(uintptr_t block, uintptr_t from, uintptr_t to) const {
  for (size_t page = (from - block) / kPage; page < (to - block + kPage - 1) / kPage; ++page) {
    if ((known[page / 64] >> (page % 64) & 1) == 0) return false;
  }
  return true;
}

void UffdMonitor::Block::mark(uintptr_t block, uintptr_t from, uintptr_t to, bool watched) {
  for (size_t page = (from - block) / kPage; page < (to - block + kPage - 1) / kPage; ++page) {
    const uint64_t bit = uint64_t{1} << (page % 64);
    known[page / 64] = watched ? known[page / 64] | bit : known[page / 64] & ~bit;
  }
}

void UffdMonitor::scan(uintptr_t block, Block& state) {
  state.scan_due = false;
  ++counts_.scans;
  MappingQuery::Run runs[MappingQuery::kMaxMappings];
  Result<size_t> found = watcher_->watched_runs(block, block + kBlock, runs,
                                                MappingQuery::kMaxMappings);
  if (!found.ok()) return;  // nothing learnt: the exact registrations go on
  for (size_t i = 0; i < *found; ++i) state.mark(block, runs[i].start, runs[i].end, true);
}

Status UffdMonitor::subscribe(uintptr_t start, size_t len) {
  if (!watcher_) return make_error(HMR_EINVAL, "userfaultfd monitor is not started");
  const uintptr_t first = start & ~(kBlock - 1);
  const uintptr_t end = start + len;
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  bool known = watcher_->knows_watched();
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = blocks_[block];
    if (!state.registered) {
      // Whole blocks first, once each: later registrations inside them then split no mapping.
      state.registered = watcher_->watch_private_parts(block, kBlock).ok();
      state.scan_due = state.registered;
      state.exact_watches = 0;
      ++counts_.block_watches;
    }
    ++state.references;
    const uintptr_t from = std::max(start, block);
    const uintptr_t to = std::min(end, block + kBlock);
    if (known && !state.knows(block, from, to)) {
      // Not at the first subscription of a block: a block holding one region would pay a
      // scan (0.5-6 us, by pages present) for nothing.  A second one that needs its own
      // registration says the block is being filled: one scan then serves the rest.
      if (state.scan_due && state.exact_watches > 0) scan(block, state);
      known = state.knows(block, from, to);
    }
  }
  // Checked after the bits: an event read before they were looked at is either applied
  // (bits cleared under this lock) or still pending here.
  if (known && !has_pending()) {
    ++counts_.known;
    return ok_status();
  }
  // The exact pages: registering them again is free of splits where the block is registered
  // already, and covers pages mapped into a hole since.
  ++counts_.exact_watches;
  Status watched = watcher_->watch(start, len);
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = blocks_[block];
    if (!watched.ok()) {
      --state.references;
    } else if (state.exact_watches < UINT8_MAX) {
      ++state.exact_watches;
    }
  }
  return watched;
}

UffdMonitor::Counts UffdMonitor::counts() {
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  return counts_;
}

bool UffdMonitor::knows_watched() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  return watcher_ && watcher_->knows_watched();
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
    const uintptr_t block = it->first;
    if (block + kBlock <= start) continue;
    it->second.registered = false;
    it->second.mark(block, std::max(start, block), std::min(end, block + kBlock), false);
  }
}

void UffdMonitor::on_change(const AddressRangeEvent& change) {
  if (change.kind != AddressRangeEvent::Kind::remove) forget_blocks(change.start, change.end);
  notify(change.start, change.end);
}

}  // namespace hmr::core
