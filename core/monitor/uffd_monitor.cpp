#include "core/monitor/uffd_monitor.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace hmr::core {
UffdMonitor& UffdMonitor::instance() {
  // Never destroyed: caches in static objects may still unsubscribe at exit.
  static UffdMonitor* monitor = new UffdMonitor();
  return *monitor;
}

UffdMonitor::~UffdMonitor() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
    thread_.join();
  }
}

Status UffdMonitor::start() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (thread_.joinable()) return ok_status();
  Result<Userfaultfd> uffd = Userfaultfd::open();
  if (!uffd.ok()) return uffd.status();
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    const int err = errno;
    return make_error(HMR_ENOMEM, "eventfd for the userfaultfd monitor: %s", std::strerror(err));
  }
  uffd_.emplace(std::move(*uffd));
  wake_ = std::move(wake);
  thread_ = std::thread([this] { run(); });
  return ok_status();
}

Status UffdMonitor::subscribe(uintptr_t start, size_t len) {
  if (!uffd_) return make_error(HMR_EINVAL, "userfaultfd monitor is not started");
  const uintptr_t first = start & ~(kBlock - 1);
  const uintptr_t end = start + len;
  std::lock_guard<std::mutex> lock(blocks_mutex_);
  // Whole blocks first, once each: later registrations inside them then split no mapping.
  // A block with holes registers only what is mapped (the kernel skips holes), so this is
  // never relied on for correctness...
  for (uintptr_t block = first; block < end; block += kBlock) {
    Block& state = blocks_[block];
    if (!state.registered) state.registered = uffd_->watch(block, kBlock).ok();
    ++state.references;
  }
  // ...the exact pages are: registering them again is free of splits where the block is
  // registered already, and covers pages mapped into a hole since.
  Status watched = uffd_->watch(start, len);
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

void UffdMonitor::run() {
  mark_event_thread();
  pollfd fds[2] = {{uffd_->fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  std::vector<AddressRangeEvent> batch;
  batch.reserve(64);
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) return;
    if (!(fds[0].revents & POLLIN)) continue;
    begin_pending();
    // Read everything queued first: each read releases an unmapping thread, which may hold
    // a lock this thread is about to need.
    AddressRangeEvent event;
    while (batch.size() < batch.capacity() && uffd_->read_event(&event)) batch.push_back(event);
    for (const AddressRangeEvent& change : batch) {
      if (change.kind != AddressRangeEvent::Kind::remove) forget_blocks(change.start, change.end);
      notify(change.start, change.end);
    }
    batch.clear();
    end_pending();
  }
}

}  // namespace hmr::core
