#include "core/monitor/monitor.h"

#include <thread>

namespace hmr::core {

namespace {
thread_local bool event_thread = false;
}

bool Monitor::on_event_thread() { return event_thread; }
void Monitor::mark_event_thread() { event_thread = true; }

void Monitor::wait_pending() const {
  while (has_pending()) std::this_thread::yield();
}

Status Monitor::add_sink(InvalidationSink* sink) {
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
