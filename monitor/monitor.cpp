#include "monitor/monitor.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "util/fork_generation.h"

namespace hmr::core {

namespace {
// initial-exec: the first touch of a dynamic TLS variable in a dlopen'ed library may call
// malloc, and this is read inside memory hooks that can run under malloc's own lock.
__attribute__((tls_model("initial-exec"))) thread_local unsigned event_scopes = 0;
__attribute__((tls_model("initial-exec"))) thread_local unsigned defer_scopes = 0;
}  // namespace

// The pins this thread holds, one frame per notify() in its second half (nested when a NIC
// callback notifies again): remove_sink() on this thread waits for the other threads' pins of
// a slot, never for its own, which would be waiting for itself.
struct Monitor::PinFrame {
  const Monitor* monitor;
  const std::vector<Pinned>* pinned;
  size_t next;  // pinned[next..] are still held
  uint32_t forks;  // forks_counted() when they were taken: a forked child holds none
  const PinFrame* outer;
};
namespace {
__attribute__((tls_model("initial-exec"))) thread_local const Monitor::PinFrame* pin_frames =
    nullptr;
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
    // Not a slot whose last sink is still being finished: its remover waits for those pins,
    // and must not wait for this sink's too.
    if (sinks_[slot] == nullptr && pins_[slot].load(std::memory_order_acquire) == 0) {
      sinks_[slot] = sink;
      sinks_end_ = std::max(sinks_end_, slot + 1);
      return ok_status();
    }
  }
  return make_error(HMR_ENOSPC, "monitor %s already serves %u caches (each domain with a cache "
                    "has two on the device monitor): close domains you no longer use",
                    name(), kMaxSinks);
}

unsigned Monitor::sink_count() {
  std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
  unsigned count = 0;
  for (unsigned slot = 0; slot < sinks_end_; ++slot) count += sinks_[slot] != nullptr ? 1 : 0;
  return count;
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
  // A notification between its two halves still calls the sink: it must outlive that.  The
  // pins this thread holds itself are not waited for (a NIC callback closing a domain would
  // wait for itself); its own notification looks again before each sink (finish_pinned()).
  if (removed == kMaxSinks) return;
  uint32_t own = 0;
  for (const PinFrame* frame = pin_frames; frame != nullptr; frame = frame->outer) {
    if (frame->monitor != this || frame->forks != forks_counted()) continue;
    for (size_t i = frame->next; i < frame->pinned->size(); ++i) {
      own += (*frame->pinned)[i].slot == removed ? 1 : 0;
    }
  }
  while (pins_[removed].load(std::memory_order_acquire) > own) std::this_thread::yield();
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
  notify_from_application(start, end);
}

void Monitor::notify_from_application(uintptr_t start, uintptr_t end) {
  // An application's thread (hmr_mem_invalidate, a runtime's free callback, a device
  // allocation seen replacing another), never a memory hook (those are event threads): the
  // sinks drop the range under the lock and keep their deregistrations, which run after it
  // is released.  Under the lock each ran on the NIC, so a callback NIC's dereg that waits
  // for the application's own lock deadlocked with a thread holding that lock while it
  // opened or closed a domain (add_sink, remove_sink) or registered device memory (found by
  // a review).  (A function of its own, so that the hot event path keeps a small frame.)
  std::vector<Pinned> pinned;
  {
    std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
    // Room for every sink first, so that the fallback below is for a heap already full.
    try {
      pinned.reserve(sinks_end_);
    } catch (const std::bad_alloc&) {
    }
    const DeferScope defer;
    for (unsigned slot = 0; slot < sinks_end_; ++slot) {
      InvalidationSink* sink = sinks_[slot];
      if (sink == nullptr) continue;
      sink->invalidate(start, end);
      if (!sink->has_deferred()) continue;
      try {
        pinned.push_back(Pinned{slot, sink});  // (first: a pin is never taken and then lost)
      } catch (const std::bad_alloc&) {
        // The range is dropped already; only its deregistrations wait, for the reaper, and
        // the other sinks are still told.  (A throw here lost their invalidations.)
        sink->finish_invalidations_later();
        continue;
      }
      pins_[slot].fetch_add(1, std::memory_order_relaxed);  // (the unlock publishes it)
    }
  }
  if (!pinned.empty()) finish_pinned(pinned);
}

void Monitor::finish_pinned(const std::vector<Pinned>& pinned) {
  PinFrame frame{this, &pinned, 0, forks_counted(), pin_frames};
  pin_frames = &frame;
  // However this ends (an exception from a sink, which hmr's API guard catches, and the
  // thread lives on): the pins not yet given back are, and the frame leaves the thread's list.
  struct Unwind {
    Monitor& monitor;
    PinFrame& frame;
    ~Unwind() {
      // (Not in a forked child: the fork handler cleared the counts this thread took.)
      if (frame.forks == forks_counted()) {
        for (size_t i = frame.next; i < frame.pinned->size(); ++i) {
          monitor.pins_[(*frame.pinned)[i].slot].fetch_sub(1, std::memory_order_release);
        }
      }
      pin_frames = frame.outer;
    }
  } unwind{*this, frame};
  for (; frame.next < pinned.size(); ++frame.next) {
    const Pinned& pin = pinned[frame.next];
    // Still attached?  Another thread's remove_sink() waits for the pin, so a sink it removed
    // is still there, but it flushes itself; this thread may have removed one itself (a NIC
    // callback of an earlier deregistration closing a domain), without waiting for its own
    // pin, and that one may be gone.  Either way: not ours to finish any more.
    bool attached = false;
    {
      std::lock_guard<std::recursive_mutex> lock(sinks_mutex_);
      attached = sinks_[pin.slot] == pin.sink;
    }
    if (attached) pin.sink->finish_invalidations();
    // A NIC callback forked: the child holds no pins (forget_sinks_in_forked_child cleared
    // them) and finishes nothing more of its parent's.
    if (frame.forks != forks_counted()) break;
    pins_[pin.slot].fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace hmr::core
