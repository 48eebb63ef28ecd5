// Monitors by name: the built-in ones and those the application imported.
#pragma once

#include <hmr/hmr.h>

#include "monitor/imported_monitor.h"
#include "monitor/monitor.h"
#include "util/status.h"

namespace hmr::core {

// nullptr for "disabled"; HMR_ENOENT for an unknown name.  An imported monitor is
// acquired (it cannot be closed until release_monitor).
Result<Monitor*> acquire_monitor(const char* name);
void release_monitor(Monitor* monitor);

Result<MonitorHandle*> import_monitor(const hmr_monitor_ops& ops);
Status close_imported_monitor(MonitorHandle* handle);

}  // namespace hmr::core
