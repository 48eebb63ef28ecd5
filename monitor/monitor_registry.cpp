#include "monitor/monitor_registry.h"

#include <pthread.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "monitor/memhooks_monitor.h"
#include "monitor/uffd_monitor.h"

namespace hmr::core {
namespace {

struct Imported {
  std::mutex mutex;
  std::vector<std::unique_ptr<ImportedMonitor>> monitors;
};
Imported& imported() {
  static Imported* registry = new Imported();  // outlives static caches
  return *registry;
}

// fork(): the registry's lock is held across it (util/fork_held_lock.h says why), and a child
// forgets the monitors its parent imported.  Their only handles are the parent's, which the
// child cannot use (util/object.h), so a domain of the child's that took one by name would
// never be told of a change: a stale registration.  Forgotten, the name is free for the child
// to import its own (the objects are left as they are, since the parent's caches may point
// at them).
void lock_before_fork() { imported().mutex.lock(); }
void unlock_in_parent() { imported().mutex.unlock(); }
void forget_in_child() {
  Imported& registry = imported();
  for (std::unique_ptr<ImportedMonitor>& monitor : registry.monitors) (void)monitor.release();
  registry.monitors.clear();
  registry.mutex.unlock();
}
[[maybe_unused]] const bool fork_handlers_registered = [] {
  (void)imported();
  return pthread_atfork(&lock_before_fork, &unlock_in_parent, &forget_in_child) == 0;
}();

}  // namespace

Result<Monitor*> acquire_monitor(const char* name) {
  if (std::strcmp(name, "disabled") == 0) return static_cast<Monitor*>(nullptr);
  if (std::strcmp(name, "userfaultfd") == 0 || std::strcmp(name, "uffd") == 0) {
    return static_cast<Monitor*>(&UffdMonitor::instance());
  }
  if (std::strcmp(name, "memhooks") == 0) return static_cast<Monitor*>(&MemhooksMonitor::instance());
  Imported& registry = imported();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& monitor : registry.monitors) {
    if (std::strcmp(monitor->name(), name) == 0) {
      monitor->acquire();
      return static_cast<Monitor*>(monitor.get());
    }
  }
  return make_error(HMR_ENOENT,
                    "unknown cache monitor '%s' (built in: memhooks, userfaultfd, disabled, default; or a name "
                    "given to hmr_monitor_import)",
                    name);
}

void release_monitor(Monitor* monitor) {
  Imported& registry = imported();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& candidate : registry.monitors) {
    if (candidate.get() == monitor) candidate->release();
  }
}

Result<MonitorHandle*> import_monitor(const hmr_monitor_ops& ops) {
  if (ops.name == nullptr || ops.name[0] == '\0') {
    return make_error(HMR_EINVAL, "an imported monitor needs a name");
  }
  if (ops.start == nullptr || ops.stop == nullptr || ops.subscribe == nullptr ||
      ops.unsubscribe == nullptr) {
    return make_error(HMR_EINVAL, "monitor '%s' lacks start, stop, subscribe or unsubscribe",
                      ops.name);
  }
  for (const char* reserved : {"disabled", "userfaultfd", "uffd", "memhooks", kDefaultMonitorName}) {
    if (std::strcmp(ops.name, reserved) == 0) {
      return make_error(HMR_EINVAL, "monitor name '%s' is hmr's own", ops.name);
    }
  }
  Imported& registry = imported();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& monitor : registry.monitors) {
    if (std::strcmp(monitor->name(), ops.name) == 0) {
      return make_error(HMR_EBUSY, "a monitor named '%s' is already imported", ops.name);
    }
  }
  registry.monitors.push_back(std::make_unique<ImportedMonitor>(ops));
  return new MonitorHandle(registry.monitors.back().get());
}

Status close_imported_monitor(MonitorHandle* handle) {
  Imported& registry = imported();
  std::unique_ptr<ImportedMonitor> closing;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto it = registry.monitors.begin(); it != registry.monitors.end(); ++it) {
      if (it->get() != handle->monitor()) continue;
      if ((*it)->in_use()) {
        return make_error(HMR_EBUSY, "monitor '%s' is used by a domain; close it first",
                          (*it)->name());
      }
      closing = std::move(*it);
      registry.monitors.erase(it);
      break;
    }
  }
  if (closing) closing->stop();
  delete handle;
  return ok_status();
}

}  // namespace hmr::core
