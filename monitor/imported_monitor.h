// A monitor the application supplies through hmr_monitor_import (libfabric's "mr_cache"
// import): its operations are called as hmr's own monitors' are, and it reports changes
// with hmr_monitor_notify.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <mutex>
#include <string>

#include "monitor/monitor.h"
#include "util/object.h"

namespace hmr::core {

class ImportedMonitor final : public Monitor {
 public:
  explicit ImportedMonitor(const hmr_monitor_ops& ops) : ops_(ops), name_(ops.name) {}

  const char* name() const override { return name_.c_str(); }
  Status start() override;
  void stop() override;
  Status subscribe(uintptr_t start, size_t len) override;
  void unsubscribe(uintptr_t start, size_t len) override;
  bool valid(uintptr_t start, size_t len) override;
  bool checks_on_hit() const override { return ops_.valid != nullptr; }

  void acquire() { users_.fetch_add(1); }
  void release() { users_.fetch_sub(1); }
  bool in_use() const { return users_.load() != 0; }

 private:
  hmr_monitor_ops ops_;
  std::string name_;
  std::mutex start_mutex_;
  bool started_ = false;
  std::atomic<int> users_{0};
};

// What an hmr_monitor handle points at.
class MonitorHandle : public Tagged<ObjectClass::monitor> {
 public:
  explicit MonitorHandle(ImportedMonitor* monitor) : monitor_(monitor) {}
  ImportedMonitor* monitor() const { return monitor_; }

 private:
  ImportedMonitor* monitor_;
};

}  // namespace hmr::core
