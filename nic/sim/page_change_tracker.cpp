#include "nic/sim/page_change_tracker.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>

namespace hmr::nic::sim {

Result<std::unique_ptr<PageChangeTracker>> PageChangeTracker::start(OnChange on_change) {
  Result<core::Userfaultfd> uffd = core::Userfaultfd::open();
  if (!uffd.ok()) return uffd.status();
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    const int err = errno;
    return make_error(HMR_ENOMEM, "eventfd for the page-change tracker: %s", std::strerror(err));
  }
  return std::unique_ptr<PageChangeTracker>(
      new PageChangeTracker(std::move(*uffd), std::move(wake), std::move(on_change)));
}

PageChangeTracker::PageChangeTracker(core::Userfaultfd uffd, UniqueFd wake, OnChange on_change)
    : uffd_(std::move(uffd)), wake_(std::move(wake)), on_change_(std::move(on_change)) {
  thread_ = std::thread([this] { run(); });
}

void PageChangeTracker::wait_until_reported() const {
  while (pending_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

PageChangeTracker::~PageChangeTracker() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

void PageChangeTracker::run() {
  pollfd fds[2] = {{uffd_.fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      uffd_.close();
      return;
    }
    // Drain events before honouring a stop request: an unmapping thread may be blocked on one.
    pending_.fetch_add(1, std::memory_order_seq_cst);
    core::AddressRangeEvent event;
    while (uffd_.read_event(&event)) on_change_(event.start, event.end);
    pending_.fetch_sub(1, std::memory_order_seq_cst);
    if (fds[1].revents & POLLIN) {
      // Close before this thread exits: its runtime may unmap memory on the way out (thread
      // caches, a sanitizer's stacks) that happens to be watched here, and nobody would read
      // that event.
      uffd_.close();
      return;
    }
  }
}

}  // namespace hmr::nic::sim
