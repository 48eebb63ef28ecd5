#include "monitor/monitor.h"

#include <thread>

namespace hmr::core {

namespace {
// initial-exec: the first touch of a dynamic TLS variable in a dlopen'ed library may call
// malloc, and this is read inside memory hooks that can run under malloc's own lock.
__attribute__((tls_model("initial-exec"))) thread_local unsigned event_scopes = 0;
}  // namespace

bool Monitor::on_event_thread() { return event_scopes != 0; }
Monitor::EventScope::EventScope() { ++event_scopes; }
Monitor::EventScope::~EventScope() { --event_scopes; }

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
