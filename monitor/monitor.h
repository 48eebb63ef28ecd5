// core::Monitor — tells caches that address ranges changed (unmapped, pages dropped, moved),
// so no cache ever hands out a registration of memory that is gone.
//
// A monitor is process-wide (one uffd thread, one set of memory hooks); each cache that
// uses it is a sink.  subscribe/unsubscribe declare the ranges the caches hold; a monitor
// may report more than that (events are filtered through the caches' indexes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <mutex>
#include <vector>

#include "util/status.h"

namespace hmr::core {

class InvalidationSink {
 public:
  virtual void invalidate(uintptr_t start, uintptr_t end) = 0;
  // In a child forked from the process that subscribed: from here on nothing tells the sink
  // what changes in this address space (the child gets libc's code back instead of memory
  // hooks, and a userfaultfd watches its parent's address space, not the child's), so what it
  // holds can no longer be trusted.  The monitor has already forgotten the sink.  Called from
  // the fork handler on the child's only thread: plain stores, no lock, nothing allocated.
  virtual void watch_lost_by_fork() {}
  // After invalidate() in a DeferScope (Monitor::notify on an application's thread), with no
  // monitor lock held: the deregistrations it deferred, done before notify() returns.
  // Whether invalidate() deferred any is what has_deferred() says.
  virtual bool has_deferred() const { return false; }
  virtual void finish_invalidations() {}
  // Instead of finish_invalidations(), when the notifying thread could not keep the sink for
  // it (out of memory): the deregistrations it deferred are left to whoever deregisters the
  // sink's dead entries next (hmr's reaper).  Allocates nothing, throws nothing.
  virtual void finish_invalidations_later() noexcept {}

 protected:
  ~InvalidationSink() = default;
};

class Monitor {
 public:
  Monitor();           // joins the process's list of monitors, for the fork handler
  virtual ~Monitor();  // leaves it
  virtual const char* name() const = 0;

  // Idempotent; the first start brings the machinery up (thread, hooks, fd).
  virtual Status start() = 0;
  virtual void stop() = 0;
  virtual Status subscribe(uintptr_t start, size_t len) = 0;
  virtual void unsubscribe(uintptr_t start, size_t len) = 0;
  // Whether a cached range is still what it was; monitors that learn of changes only on
  // demand (allocation ids, imported monitors) answer here.  Called on cache hits only
  // when checks_on_hit() is true.
  virtual bool valid(uintptr_t start, size_t len) { (void)start; (void)len; return true; }
  virtual bool checks_on_hit() const { return false; }
  // Whether [start, end) may be changing right now, so that a registration of it made
  // meanwhile could be of the old pages: a cache then hands it out without filing it.
  // Monitors that see a change only after it (userfaultfd's UNMAP) answer no.
  virtual bool changing(uintptr_t start, uintptr_t end) const {
    (void)start;
    (void)end;
    return false;
  }

  // The userfaultfd kernel releases an unmapping thread the moment its event is read, which
  // is before the caches are told.  A monitor with such a window raises `pending` before it
  // reads and lowers it after notifying; cache lookups wait while it is up, so no lookup
  // after munmap() returns can see the old entry.
  bool has_pending() const { return pending_.load(std::memory_order_seq_cst) != 0; }
  void wait_pending() const;

  Status add_sink(InvalidationSink* sink);
  void remove_sink(InvalidationSink* sink);
  // How many sinks (caches) it serves now.
  unsigned sink_count();
  // Delivers an invalidation to every sink; safe from any thread, including the monitor's.
  void notify(uintptr_t start, uintptr_t end);

  // True inside an EventScope: a monitor's event thread (UffdWatcher), or a memory hook
  // running in the application's thread, possibly under glibc's malloc lock.  Work there must not free
  // or unmap anything: it could wait for itself.  Caches defer their deregistrations.
  static bool on_event_thread();
  // True inside a DeferScope: notify() on an application's thread, while it holds the sinks'
  // lock.  Caches keep their deregistrations for finish_invalidations(), which notify() calls
  // after releasing the lock (no hmr lock is held while a NIC deregisters: docs/semantics.md).
  static bool deferring_to_caller();

  class EventScope {
   public:
    EventScope();
    ~EventScope();
    EventScope(const EventScope&) = delete;
    EventScope& operator=(const EventScope&) = delete;
  };
  class DeferScope {
   public:
    DeferScope();
    ~DeferScope();
    DeferScope(const DeferScope&) = delete;
    DeferScope& operator=(const DeferScope&) = delete;
  };

 protected:
  // Raised and lowered around event reads by a monitor with such a window (UffdWatcher).
  std::atomic<uint32_t>& pending_counter() { return pending_; }

  // Around fork(), for what a monitor keeps beyond its sinks: before_fork() takes the locks
  // a child must find consistent, after_fork_in_parent() gives them back, and
  // after_fork_in_child() makes the monitor as if never started (its thread does not exist in
  // the child, its fd watches the parent) after every sink was told (watch_lost_by_fork).
  virtual void before_fork() {}
  virtual void after_fork_in_parent() {}
  virtual void after_fork_in_child() {}

 public:
  struct PinFrame;  // (monitor.cpp: the pins a thread holds)

 private:
  friend struct MonitorForkHandlers;
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;
  void forget_sinks_in_forked_child();

  // notify() on an application's thread, in two halves: under the lock, the sinks drop the
  // range and those with deregistrations left are pinned; then, with no lock held, each pinned
  // sink's deferred deregistrations.
  struct Pinned {
    unsigned slot;
    InvalidationSink* sink;
  };
  [[gnu::noinline]] void notify_from_application(uintptr_t start, uintptr_t end);
  void finish_pinned(const std::vector<Pinned>& pinned);

  std::atomic<uint32_t> pending_{0};
  // Two per cached domain (its host and device caches) on the device monitor, which every
  // domain joins.
  static constexpr unsigned kMaxSinks = 4096;
  // Recursive: a sink's invalidation may unmap (a dead dma-buf mapping), and a memory hook
  // then notifies again on the same thread.  Other threads wait, so remove_sink() returns
  // only when no notification is inside the sink.
  std::recursive_mutex sinks_mutex_;
  InvalidationSink* sinks_[kMaxSinks] = {};
  unsigned sinks_end_ = 0;  // one past the highest slot ever used: where notify() stops
  // Per slot, the notifications between their two halves that will still call its sink's
  // finish_invalidations(): remove_sink() waits for them (the sink must outlive them), except
  // on the thread that holds one (a NIC callback that closes a domain), which cannot.
  std::atomic<uint32_t> pins_[kMaxSinks] = {};
};

}  // namespace hmr::core
