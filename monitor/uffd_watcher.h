// A userfaultfd and the one thread that reads it: the machinery both the host-memory monitor
// and the software NIC's MMU_NOTIFY model stand on.
//
// The kernel releases an unmapping thread the moment its event is read, before anyone was
// told.  The owner's `pending` counter is raised before each read and lowered after the
// callbacks for what was read, so an owner that waits while it is up never acts on pages
// that changed without being told.  Events are read in a batch before any callback runs:
// each read releases an unmapping thread, which may hold a lock a callback needs; and a
// callback that waits reads on meanwhile (read_ahead).  The
// thread counts as a monitor event thread (Monitor::on_event_thread), so caches never free
// or unmap from it, and it closes the userfaultfd itself before exiting: its runtime may
// unmap watched memory on the way out, and nobody would read that event.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "util/status.h"
#include "util/unique_fd.h"
#include "util/userfaultfd.h"

namespace hmr::core {

class UffdWatcher {
 public:
  // Runs on the watcher's thread; it must not wait for anything an unmapping thread may hold.
  using OnChange = std::function<void(const AddressRangeEvent& change)>;

  // `pending` must outlive the watcher.  `owner` names it in error reasons.  `know_watched`:
  // see Userfaultfd::open.
  static Result<std::unique_ptr<UffdWatcher>> start(std::atomic<uint32_t>& pending,
                                                    OnChange on_change, const char* owner,
                                                    bool know_watched = false);
  ~UffdWatcher();  // stops the thread
  // In a forked child, where the thread does not exist and the fd watches the parent's address
  // space: closes both fds.  The object must then be leaked, never destroyed (its std::thread
  // names a thread of the parent).
  void abandon_in_forked_child() {
    uffd_.close();
    wake_.reset();
  }

  Status watch(uintptr_t start, size_t len) { return uffd_.watch(start, len); }
  bool knows_watched() const { return uffd_.knows_watched(); }
  // Whether the kernel holds an event the watcher's thread has not read yet (a poll, no
  // wait): an unmap it holds is not yet in Monitor::has_pending().
  bool event_waiting() const;
  const std::string& why_not_knowing() const { return uffd_.why_not_knowing(); }
  Result<MappingQuery::Run> watch_mapping_part(uintptr_t address, uintptr_t lo, uintptr_t hi) {
    return uffd_.watch_mapping_part(address, lo, hi);
  }
  Result<size_t> watched_runs_of_mapping(uintptr_t address, uintptr_t lo, uintptr_t hi,
                                         MappingQuery::Run* runs, size_t max_runs) const {
    return uffd_.watched_runs_of_mapping(address, lo, hi, runs, max_runs);
  }
  Result<bool> all_watched(uintptr_t start, uintptr_t end) const {
    return uffd_.all_watched(start, end);
  }

  // Only from an OnChange callback, on the watcher's thread: reads the events the kernel holds
  // now into the watcher's queue (their callbacks run after the current one), which releases
  // the threads that unmapped meanwhile.  A callback that has to wait for a lock calls it while
  // it waits: the lock's holder may be waiting for such a thread (UffdMonitor::forget_blocks).
  // Returns whether it read anything.
  bool read_ahead();

 private:
  UffdWatcher(Userfaultfd uffd, UniqueFd wake, std::atomic<uint32_t>& pending,
              OnChange on_change);
  void run();

  Userfaultfd uffd_;
  UniqueFd wake_;  // eventfd: tells the thread to stop
  std::atomic<uint32_t>& pending_;
  OnChange on_change_;
  // Events read and not yet handed to on_change_, oldest at queue_head_: the thread's alone.
  // When it is full the newest widens to cover what more is read (read_ahead).
  static constexpr size_t kQueue = 256;
  AddressRangeEvent queue_[kQueue] = {};
  size_t queue_head_ = 0;
  size_t queued_ = 0;
  std::thread thread_;
};

}  // namespace hmr::core
