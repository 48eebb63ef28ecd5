#include "monitor/imported_monitor.h"

namespace hmr::core {

Status ImportedMonitor::start() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (started_) return ok_status();
  const int rc = ops_.start(ops_.context);
  if (rc != 0) {
    return make_error(rc < 0 ? -rc : HMR_EIO, "imported monitor '%s' failed to start (%d)",
                      name_.c_str(), rc);
  }
  started_ = true;
  return ok_status();
}

void ImportedMonitor::stop() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (!started_) return;
  ops_.stop(ops_.context);
  started_ = false;
}

Status ImportedMonitor::subscribe(uintptr_t start, size_t len) {
  const int rc = ops_.subscribe(ops_.context, reinterpret_cast<const void*>(start), len);
  if (rc != 0) {
    return make_error(rc < 0 ? -rc : HMR_EIO, "imported monitor '%s' refused [%#lx, +%zu) (%d)",
                      name_.c_str(), static_cast<unsigned long>(start), len, rc);
  }
  return ok_status();
}

void ImportedMonitor::unsubscribe(uintptr_t start, size_t len) {
  ops_.unsubscribe(ops_.context, reinterpret_cast<const void*>(start), len);
}

bool ImportedMonitor::valid(uintptr_t start, size_t len) {
  return ops_.valid == nullptr || ops_.valid(ops_.context, reinterpret_cast<const void*>(start), len) != 0;
}

}  // namespace hmr::core
