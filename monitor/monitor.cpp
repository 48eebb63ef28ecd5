#include "monitor/monitor.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

namespace hmr::core {

namespace {
// initial-exec: the first touch of a dynamic TLS variable in a dlopen'ed library may call
// malloc, and this is read inside memory hooks that can run under malloc's own lock.
__attribute__((tls_model("initial-exec"))) thread_local unsigned event_scopes = 0;
__attribute__((tls_model("initial-exec"))) thread_local unsigned defer_scopes = 0;
// The pins this thread holds (notify()'s second half): remove_sink() on this thread cannot wait
// for them.
__attribute__((tls_model("initial-exec"))) thread_local unsigned pins_held = 0;
}  // namespace

// Every monitor of the process, so that a forked child can tell their sinks that nothing
// watches for them any more.  fork() in a multi-threaded program is common (a data loader's
// workers), and a cache in the child that went on trusting its entries would hand out the
// parent's registrations for memory the child has unmapped and mapped again.
struct MonitorForkHandlers {
  std::mutex mutex;
  std::vector<Monitor*> monitors;
  int atfork_error = 0;  // pthread_atfork's, if it failed: no sink is then accepted

  static MonitorForkHandlers& get() {
    static MonitorForkHandlers* handlers = [] {  // never destroyed: monitors outlive statics
      auto* created = new MonitorForkHandlers();
      created->atfork_error = pthread_atfork(&prepare, &parent, &child);
      return created;
    }();
    return *handlers;
  }
  // The list and each monitor's own state are consistent across fork: no thread is between
  // taking and putting back those locks when the child is made.  The sinks' lock is not
  // taken: a thread may hold it in notify() while it waits for another monitor's event (a
  // sink that unmaps), and taking both here could wait for ever; the child needs only the
  // sink pointers, each stored whole.
  static void prepare() {
    MonitorForkHandlers& self = get();
    self.mutex.lock();
    for (Monitor* monitor : self.monitors) monitor->before_fork();
  }
  static void parent() {
    MonitorForkHandlers& self = get();
    for (auto it = self.monitors.rbegin(); it != self.monitors.rend(); ++it) {
      (*it)->after_fork_in_parent();
    }
    self.mutex.unlock();
  }
  static void child() {
    MonitorForkHandlers& self = get();
    for (auto it = self.monitors.rbegin(); it != self.monitors.rend(); ++it) {
      (*it)->forget_sinks_in_forked_child();
      (*it)->after_fork_in_child();
    }
    self.mutex.unlock();
  }
};

Monitor::Monitor() {
  MonitorForkHandlers& handlers = MonitorForkHandlers::get();
  const std::lock_guard<std::mutex> lock(handlers.mutex);
  handlers.monitors.push_back(this);
}

Monitor::~Monitor() {
  MonitorForkHandlers& handlers = MonitorForkHandlers::get();
  const std::lock_guard<std::mutex> lock(handlers.mutex);
  std::erase(handlers.monitors, this);
}

void Monitor::forget_sinks_in_forked_child() {
  // Read without the lock (see prepare()): a sink being added or removed by a thread of the
  // parent is either here whole or not at all, and a removed one was detached before its
  // destruction went any further.
  for (InvalidationSink*& sink : sinks_) {
    if (sink == nullptr) continue;
    sink->watch_lost_by_fork();
    sink = nullptr;
  }
  // A thread of the parent may have been reading an event, or finishing a notification:
  // nobody will lower those counts here.
  pending_.store(0, std::memory_order_relaxed);
  for (std::atomic<uint32_t>& pins : pins_) pins.store(0, std::memory_order_relaxed);
  // A thread of the parent may have held it, and that thread does not exist here.
  sinks_mutex_.~recursive_mutex();
  new (&sinks_mutex_) std::recursive_mutex();
}

bool Monitor::on_event_thread() { return event_scopes != 0; }
Monitor::EventScope::EventScope() { ++event_scopes; }
Monitor::EventScope::~EventScope() { --event_scopes; }
bool Monitor::deferring_to_caller() { return defer_scopes != 0; }
Monitor::DeferScope::DeferScope() { ++defer_scopes; }
Monitor::DeferScope::~DeferScope() { --defer_scopes; }

void Monitor::wait_pending() const {
  while (has_pending()) std::this_thread::yield();
}

Status Monitor::add_sink(InvalidationSink* sink) {
  if (const int err = MonitorForkHandlers::get().atfork_error; err != 0) {
    return make_error(HMR_ENOMEM, "monitor %s: pthread_atfork: %s (a forked child's caches "
                      "could not be told that nothing watches them)", name(), std::strerror(err));
  }
  std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
  for (unsigned slot = 0; slot < kMaxSinks; ++slot) {
    if (sinks_[slot] == nullptr) {
      sinks_[slot] = sink;
      sinks_end_ = std::max(sinks_end_, slot + 1);
      return ok_status();
    }
  }
  return make_error(HMR_ENOSPC, "monitor %s already serves %u caches (each domain with a cache "
                    "has two on the device monitor): close domains you no longer use",
                    name(), kMaxSinks);
}

void Monitor::remove_sink(InvalidationSink* sink) {
  unsigned removed = kMaxSinks;
  {
    std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
    for (unsigned slot = 0; slot < sinks_end_; ++slot) {
      if (sinks_[slot] == sink) {
        sinks_[slot] = nullptr;
        removed = slot;
      }
    }
  }
  // A notification between its two halves still calls the sink: it must outlive that.  (Not
  // on a thread that holds pins itself, a NIC callback closing a domain: it would wait for
  // itself.  Its own notification looks again before each sink, finish_pinned().)
  if (removed == kMaxSinks || pins_held != 0) return;
  while (pins_[removed].load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void Monitor::notify(uintptr_t start, uintptr_t end) {
  // A monitor's event thread or a memory hook: caches defer their deregistrations to hmr's
  // reaper (EventScope), so holding the lock throughout costs nothing.
  if (on_event_thread()) {
    std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
    for (unsigned slot = 0; slot < sinks_end_; ++slot) {
      if (InvalidationSink* sink = sinks_[slot]) sink->invalidate(start, end);
    }
    return;
  }
  // An application's thread (hmr_mem_invalidate, a runtime's free callback, a device
  // allocation seen replacing another): the sinks drop the range under the lock and keep
  // their deregistrations, which run after it is released.  Under the lock each ran on the
  // NIC, so a callback NIC's dereg that waits for the application's own lock deadlocked with
  // a thread holding that lock while it opened or closed a domain (add_sink, remove_sink) or
  // registered device memory (found by a review).
  unsigned slots[kMaxSinks];
  InvalidationSink* pinned[kMaxSinks];
  size_t count = 0;
  {
    std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
    const DeferScope defer;
    for (unsigned slot = 0; slot < sinks_end_; ++slot) {
      InvalidationSink* sink = sinks_[slot];
      if (sink == nullptr) continue;
      sink->invalidate(start, end);
      if (!sink->has_deferred()) continue;
      pins_[slot].fetch_add(1, std::memory_order_relaxed);  // (the unlock publishes it)
      slots[count] = slot;
      pinned[count] = sink;
      ++count;
    }
  }
  finish_pinned(slots, pinned, count);
}

void Monitor::finish_pinned(const unsigned* slots, InvalidationSink* const* sinks, size_t count) {
  pins_held += static_cast<unsigned>(count);
  for (size_t i = 0; i < count; ++i) {
    // Still attached?  Another thread's remove_sink() waits for the pin, so a sink it removed
    // is still there to finish, but it will flush itself anyway; this thread may have removed
    // one itself (a NIC callback of an earlier deregistration closing a domain), without
    // waiting, and that one may be gone.  Either way: not ours to finish any more.
    bool attached = false;
    {
      std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
      attached = sinks_[slots[i]] == sinks[i];
    }
    if (attached) sinks[i]->finish_invalidations();
    pins_[slots[i]].fetch_sub(1, std::memory_order_release);
    --pins_held;
  }
}

}  // namespace hmr::core
