// DeferredReaper: one thread per process that deregisters what monitor events left dead.
//
// A monitor's event thread and a memory hook (which may run under glibc's malloc lock) must
// not call the NIC: a deregistration may unmap, and the unmap could wait for that very
// thread.  So a cache leaves the entries an event killed on its deferred list.  Before this
// reaper, that list waited for the domain's next registration or statistics call: memory the
// application freed stayed pinned, and its NIC key taken, for as long as the application
// made no further call (docs/semantics.md, "Under pressure").  Now the event side wakes this
// thread (one write(2) to an eventfd: no lock, no allocation, safe in a hook), and it
// finalizes the list at once.
//
// Locking: mutex_ guards the list of caches and `serving_`, and is only ever held for a few
// instructions, never across a NIC call, so fork()'s prepare handler may take it without
// waiting on anything else.  The reaper marks the cache it serves (`serving_`) and releases the
// mutex before it calls the cache; remove() waits (yielding) until it is not that cache.
// A forked child starts with no caches listed and no thread: its first cache starts its own.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "util/status.h"

namespace hmr::core {

class RegistrationCache;

class DeferredReaper {
 public:
  static DeferredReaper& instance();  // never destroyed: caches may outlive static destructors

  // Serves `cache` from now on, starting the thread (in this process) the first time.
  Status add(RegistrationCache* cache);
  // Stops serving `cache`; returns once the reaper is not inside it (nor will be).
  void remove(RegistrationCache* cache);
  // A cache deferred something: the reaper looks at every cache soon.  From any thread,
  // including a monitor's event thread and a memory hook.
  void wake();

 private:
  DeferredReaper() = default;
  void run();
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();

  std::mutex mutex_;
  std::vector<RegistrationCache*> caches_;
  // The reaper's copy of caches_ for one round, and its spare.  The thread allocates nothing
  // (a bad_alloc there would end the process): add() makes the room, on the application's
  // thread, where running out of memory is an error code.  Invariant, under mutex_:
  // round_.capacity() >= caches_.size() or spare_.capacity() >= caches_.size().  The thread
  // swaps them under mutex_ at a round's start when round_ is too small, and walks round_
  // outside it; add() touches only spare_, and only under mutex_.
  std::vector<RegistrationCache*> round_;
  std::vector<RegistrationCache*> spare_;
  RegistrationCache* serving_ = nullptr;
  pid_t thread_pid_ = 0;  // the process whose reaper thread runs (0: none)
  // An eventfd, made with the thread and kept for the life of the process; a forked child
  // closes its copy (the parent's reaper reads it) and makes its own with its own thread.
  std::atomic<int> wakeup_{-1};
};

}  // namespace hmr::core
