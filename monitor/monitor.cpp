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
  // A thread of the parent may have been reading an event: nobody will lower the count here.
  pending_.store(0, std::memory_order_relaxed);
  // A thread of the parent may have held it, and that thread does not exist here.
  sinks_mutex_.~recursive_mutex();
  new (&sinks_mutex_) std::recursive_mutex();
}

bool Monitor::on_event_thread() { return event_scopes != 0; }
Monitor::EventScope::EventScope() { ++event_scopes; }
Monitor::EventScope::~EventScope() { --event_scopes; }

void Monitor::wait_pending() const {
  while (has_pending()) std::this_thread::yield();
}

Status Monitor::add_sink(InvalidationSink* sink) {
  if (const int err = MonitorForkHandlers::get().atfork_error; err != 0) {
    return make_error(HMR_ENOMEM, "monitor %s: pthread_atfork: %s (a forked child's caches "
                      "could not be told that nothing watches them)", name(), std::strerror(err));
  }
  std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
  for (InvalidationSink*& slot : sinks_) {
    if (slot == nullptr) {
      slot = sink;
      return ok_status();
    }
  }
  return make_error(HMR_ENOSPC, "monitor %s already serves %u caches", name(), kMaxSinks);
}

void Monitor::remove_sink(InvalidationSink* sink) {
  std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
  for (InvalidationSink*& slot : sinks_) {
    if (slot == sink) slot = nullptr;
  }
}

void Monitor::notify(uintptr_t start, uintptr_t end) {
  std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
  for (InvalidationSink* sink : sinks_) {
    if (sink != nullptr) sink->invalidate(start, end);
  }
}

}  // namespace hmr::core
