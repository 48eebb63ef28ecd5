#include "monitor/uffd_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "monitor/monitor.h"
#include "util/wait_readable.h"

namespace hmr::core {

Result<std::unique_ptr<UffdWatcher>> UffdWatcher::start(std::atomic<uint32_t>& pending,
                                                        OnChange on_change, const char* owner,
                                                        bool know_watched) {
  Result<Userfaultfd> uffd = Userfaultfd::open(know_watched);
  if (!uffd.ok()) return uffd.status();
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    const int err = errno;
    return make_error(HMR_ENOMEM, "eventfd for the %s: %s", owner, std::strerror(err));
  }
  return std::unique_ptr<UffdWatcher>(
      new UffdWatcher(std::move(*uffd), std::move(wake), pending, std::move(on_change)));
}

UffdWatcher::UffdWatcher(Userfaultfd uffd, UniqueFd wake, std::atomic<uint32_t>& pending,
                         OnChange on_change)
    : uffd_(std::move(uffd)), wake_(std::move(wake)), pending_(pending),
      on_change_(std::move(on_change)) {
  thread_ = std::thread([this] { run(); });
}

UffdWatcher::~UffdWatcher() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

bool UffdWatcher::event_waiting() const {
  pollfd ready{uffd_.fd(), POLLIN, 0};
  const int polled = poll(&ready, 1, 0);
  // A poll that failed (RLIMIT_NOFILE lowered to 0) cannot say there is none.
  return polled < 0 || (polled > 0 && (ready.revents & POLLIN) != 0);
}

bool UffdWatcher::read_ahead() {
  bool read = false;
  AddressRangeEvent event;
  while (uffd_.read_event(&event)) {
    read = true;
    if (queued_ < kQueue) {
      queue_[(queue_head_ + queued_) % kQueue] = event;
      ++queued_;
      continue;
    }
    // Full (as many threads unmapping at once as the queue holds, while a callback waits for
    // a lock): the newest queued event widens to cover this one, as an unmap.  An event left
    // unread keeps its unmapper waiting, and the lock's holder may wait for that thread (a
    // deadlock: UffdMonitor::forget_blocks); telling the caches of more than changed costs
    // them entries, and the sim NIC's MMU-notifier emulation marks registrations in the wider
    // range stale (an RMA through them fails until hmr_mr_refresh, as after a real
    // invalidation); the watcher must not allocate (an unmapper may hold malloc's lock).
    AddressRangeEvent& newest = queue_[(queue_head_ + queued_ - 1) % kQueue];
    newest = {AddressRangeEvent::Kind::unmap, std::min(newest.start, event.start),
              std::max(newest.end, event.end)};
  }
  return read;
}

void UffdWatcher::run() {
  const Monitor::EventScope event_thread;
  pollfd fds[2] = {{uffd_.fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  bool poll_refused = false;
  for (;;) {
    // (Where poll refuses, both fds are read without waiting each millisecond: stopping here
    // would leave unmappers waiting and the caches deaf, util/wait_readable.h.)
    wait_readable(fds, 2, "userfaultfd event thread", poll_refused);
    // Events before a stop request: an unmapping thread may be blocked on one.
    if (fds[0].revents & POLLIN) {
      pending_.fetch_add(1, std::memory_order_seq_cst);
      read_ahead();
      while (queued_ != 0) {
        const AddressRangeEvent change = queue_[queue_head_];  // a copy: read_ahead() refills
        queue_head_ = (queue_head_ + 1) % kQueue;
        --queued_;
        on_change_(change);
      }
      pending_.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (fds[1].revents & POLLIN) {
      // Read the stop request, not only poll for it: the read is what orders everything the
      // stopping thread did before its write (watch() calls included) before the close below,
      // for ThreadSanitizer as for the reader of this code.
      // (Nothing to read, EAGAIN, only where poll refused: not a stop request.)
      uint64_t stop = 0;
      if (::read(wake_.get(), &stop, sizeof stop) == sizeof stop) break;
    }
  }
  uffd_.close();
}

}  // namespace hmr::core
