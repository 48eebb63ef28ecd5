#include "monitor/uffd_monitor.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <iterator>
#include <thread>

#include "util/environment.h"

namespace hmr::core {

UffdMonitor& UffdMonitor::instance() {
  // Never destroyed: caches in static objects may still unsubscribe at exit.
  static UffdMonitor* monitor = new UffdMonitor();
  return *monitor;
}

Status UffdMonitor::start() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (watcher_) return ok_status();
  // 0 keeps the way of kernels before 6.11 (one registration per miss), to compare or to
  // test it where the kernel could do better.
  Result<bool> ask_kernel = env_bool("HMR_UFFD_ASK_KERNEL", true);
  if (!ask_kernel.ok()) return ask_kernel.status();
  Result<std::unique_ptr<UffdWatcher>> watcher = UffdWatcher::start(
      pending_counter(), [this](const AddressRangeEvent& change) { on_change(change); },
      "userfaultfd monitor", /*know_watched=*/*ask_kernel);
  if (!watcher.ok()) return watcher.status();
  watcher_ = std::move(*watcher);
  why_not_known_ = *ask_kernel ? watcher_->why_not_knowing() : "HMR_UFFD_ASK_KERNEL=0";
  return ok_status();
}

// Across fork(): the child finds the monitor's state consistent, and as if never started,
// since its userfaultfd watches the parent's address space (the child's mappings lost their
// registrations: no UFFD_FEATURE_EVENT_FORK) and its thread stayed in the parent.  The first
// cache of the child starts it again, with an fd of its own.
void UffdMonitor::before_fork() {
  start_mutex_.lock();
  blocks_mutex_.lock();
}

void UffdMonitor::after_fork_in_parent() {
  blocks_mutex_.unlock();
  start_mutex_.unlock();
}

void UffdMonitor::after_fork_in_child() {
  if (watcher_) {
    watcher_->abandon_in_forked_child();
    (void)watcher_.release();  // never destroyed: see UffdWatcher::abandon_in_forked_child
  }
  blocks_.clear();  // nothing of the child's is watched
  last_block_ = 0;
  last_state_ = nullptr;
  blocks_mutex_.unlock();
  start_mutex_.unlock();
}

std::pair<size_t, size_t> UffdMonitor::Block::pages(uintptr_t block, uintptr_t from,
                                                     uintptr_t to) {
  return {(from - block) / kPage, (to - block + kPage - 1) / kPage};
}

bool UffdMonitor::Block::knows(uintptr_t block, uintptr_t from, uintptr_t to) const {
  const auto [first, end] = pages(block, from, to);
  for (size_t page = first; page < end; ++page) {
    if ((known[page / 64] >> (page % 64) & 1) == 0) return false;
  }
  return true;
}

void UffdMonitor::Block::mark(uintptr_t block, uintptr_t from, uintptr_t to, bool watched) {
  const auto [first, end] = pages(block, from, to);
  for (size_t page = first; page < end; ++page) {
    const uint64_t bit = uint64_t{1} << (page % 64);
    known[page / 64] = watched ? known[page / 64] | bit : known[page / 64] & ~bit;
  }
}

void UffdMonitor::scan(uintptr_t block, uintptr_t address, Block& state) {
  state.scan_due = false;
  ++counts_.scans;
  MappingQuery::Run runs[16];
  Result<size_t> found =
      watcher_->watched_runs_of_mapping(address, block, block + kBlock, runs, std::size(runs));
  if (!found.ok()) return;  // nothing learnt: registrations go on
  for (size_t i = 0; i < *found; ++i) state.mark(block, runs[i].start, runs[i].end, true);
}

UffdMonitor::Block& UffdMonitor::state_of(uintptr_t block) {
  // Subscriptions come in runs inside one block (a pool being filled, a heap arena): the last
  // block answers most of them without a walk of the map.  Map nodes never move or go.
  if (block != last_block_ || last_state_ == nullptr) {
    last_state_ = &blocks_.find(block)->second;  // filed by file_blocks()
    last_block_ = block;
  }
  return *last_state_;
}

void UffdMonitor::file_blocks(uintptr_t start, uintptr_t end, std::unique_lock<std::mutex>& lock,
                              std::map<uintptr_t, Block>& spare) {
  const uintptr_t first = start & ~(kBlock - 1);
  bool missing = false;
  for (uintptr_t block = first; block < end && !missing; block += kBlock) {
    missing = !(block == last_block_ && last_state_ != nullptr) && !blocks_.contains(block);
  }
  if (!missing) return;
  lock.unlock();
  for (uintptr_t block = first; block < end; block += kBlock) spare.try_emplace(block);
  lock.lock();
  // Blocks are never unfiled; one another subscriber filed meanwhile keeps its node in
  // `spare`, freed by the caller after the lock is let go.
  for (uintptr_t block = first; block < end; block += kBlock) {
    if (!blocks_.contains(block)) blocks_.insert(spare.extract(block));
  }
}

Status UffdMonitor::subscribe(uintptr_t start, size_t len) {
  if (!watcher_) return make_error(HMR_EINVAL, "userfaultfd monitor is not started");
  // The block loops below step to `end` by kBlock: in the address space's last block the step
  // wraps to 0, still below `end`, and they never ended (filing blocks until memory ran out).
  // No user mapping is there (user space ends far below it), so there is nothing to watch.
  if (start + len > UINTPTR_MAX - kBlock + 1) {
    return make_error(HMR_EFAULT,
                      "userfaultfd monitor: [0x%" PRIxPTR ", +%zu) reaches the address space's "
                      "last %zu bytes, where no user memory can be",
                      start, len, static_cast<size_t>(kBlock));
  }
  std::map<uintptr_t, Block> spare;  // declared first: destroyed after the lock is let go
  std::unique_lock<std::mutex> lock(blocks_mutex_);
  file_blocks(start, start + len, lock, spare);
  if (watcher_->knows_watched()) return subscribe_knowing(start, start + len);
  return subscribe_blind(start, start + len);
}

Status UffdMonitor::subscribe_knowing(uintptr_t start, uintptr_t end) {
  const uintptr_t first = start & ~(kBlock - 1);
  bool known = true;
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = state_of(block);
    ++state.references;
    const uintptr_t from = std::max(start, block);
    const uintptr_t to = std::min(end, block + kBlock);
    if (known && !state.knows(block, from, to)) {
      // Only where a registration since the last scan may have covered these pages: a scan
      // learns nothing about a mapping nobody registered, and a block holding one region
      // would pay it (0.5-6 us, by pages present) for nothing.  A second subscription inside
      // what the first registered says the block is being filled: one scan serves the rest.
      if (state.scan_due && state.registered_from <= from && from < state.registered_to) {
        scan(block, from, state);
      }
      known = state.knows(block, from, to);
    }
  }
  // Checked after the marks: an event read before they were looked at is either applied
  // (marks cleared under this lock) or still pending here.  One the kernel holds unread is
  // neither: another thread may have mapped the range again after an unmap whose event is
  // not read yet (the kernel raises it once the unmapper has let go of the address space),
  // and trusting the old marks would file the new mapping unwatched.  (Between the unmapper
  // letting go and the kernel queueing its event nothing tells: docs/semantics.md.)
  // The kernel's queue first: the watcher raises the pending count before it reads, and
  // cannot lower it for an unmap while this lock is held, so one of the two sees an event
  // that was already raised (the other order missed one read between the two looks).
  if (known && !watcher_->event_waiting() && !has_pending()) {
    ++counts_.known;
    return ok_status();
  }
  ++counts_.registrations;
  Status registered = ok_status();
  for (uintptr_t block = first; block < end; block += kBlock) {
    Result<MappingQuery::Run> run =
        register_in_block(block, std::max(start, block), std::min(end, block + kBlock));
    if (!run.ok()) {
      registered = run.status();
      break;
    }
    // What a scan may now learn: everything registered in the block since the last one.
    Block& state = state_of(block);
    state.registered_from = state.scan_due ? std::min(state.registered_from, run->start)
                                           : run->start;
    state.registered_to = state.scan_due ? std::max(state.registered_to, run->end) : run->end;
    state.scan_due = true;
  }
  if (!registered.ok()) {
    for (uintptr_t block = first; block < end; block += kBlock) --state_of(block).references;
  }
  return registered;
}

Result<MappingQuery::Run> UffdMonitor::register_in_block(uintptr_t block, uintptr_t from,
                                                         uintptr_t to) {
  // The whole part of the mapping in the block, so that later registrations there split
  // nothing and a scan finds them watched...
  MappingQuery::Run registered{from, to};
  Result<MappingQuery::Run> part = watcher_->watch_mapping_part(from, block, block + kBlock);
  if (part.ok() && part->start <= from && to <= part->end) {
    registered = *part;
  } else {
    // ...unless the range spans mappings (or a hole): then its exact pages, each checked.
    Status watched = watcher_->watch(from, to - from);
    if (!watched.ok()) return watched;
  }
  // The kernel registers what is mapped and skips holes: had another thread unmapped our
  // pages just before and mapped new ones just after, the registration would succeed and
  // leave the new pages unwatched (no event when they go, a stale entry).  Pages watched now
  // are ours until an event says otherwise.
  if (after_registration_for_test_ != nullptr) after_registration_for_test_(from);
  Result<bool> watched = watcher_->all_watched(from, to);
  if (!watched.ok()) return watched.status();
  if (!*watched) {
    return make_error(HMR_EAGAIN, "[%#lx, %#lx) changed while it was being watched",
                      static_cast<unsigned long>(from), static_cast<unsigned long>(to));
  }
  state_of(block).mark(block, from, to, true);
  return registered;
}

Status UffdMonitor::subscribe_blind(uintptr_t start, uintptr_t end) {
  const uintptr_t first = start & ~(kBlock - 1);
  // Whole blocks first, once each: later registrations inside them then split no mapping.
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = state_of(block);
    if (!state.registered) state.registered = watcher_->watch(block, kBlock).ok();
    ++state.references;
  }
  // The exact pages: registering them again is free of splits where the block is registered
  // already, and covers pages mapped into a hole since.
  ++counts_.registrations;
  Status watched = watcher_->watch(start, end - start);
  if (!watched.ok()) {
    for (uintptr_t block = first; block < end; block += kBlock) --state_of(block).references;
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

std::string UffdMonitor::why_not_known() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  return why_not_known_;
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
  // The lock's holder, a subscriber, may wait for a thread that waits for us: one that holds
  // malloc's lock while it unmaps watched memory (free() trimming the heap) waits until its
  // event is read, and a subscriber's error path allocates.  So we read on while we wait.
  std::unique_lock<std::mutex> lock(blocks_mutex_, std::try_to_lock);
  while (!lock.owns_lock()) {
    if (!watcher_->read_ahead()) std::this_thread::yield();
    (void)lock.try_lock();
  }
  auto it = blocks_.upper_bound(start & ~(kBlock - 1));
  if (it != blocks_.begin()) --it;
  for (; it != blocks_.end() && it->first < end; ++it) {
    const uintptr_t block = it->first;
    if (block + kBlock <= start) continue;
    Block& state = it->second;
    state.registered = false;
    state.mark(block, std::max(start, block), std::min(end, block + kBlock), false);
    // What was registered here since the last scan may be gone: a scan now would likely
    // learn nothing (an application that unmaps and maps again at one address).
    state.scan_due = false;
  }
}

void UffdMonitor::on_change(const AddressRangeEvent& change) {
  if (change.kind != AddressRangeEvent::Kind::remove) forget_blocks(change.start, change.end);
  notify(change.start, change.end);
}

}  // namespace hmr::core
