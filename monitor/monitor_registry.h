// Monitors by name: the built-in ones and those the application imported.
#pragma once

#include <hmr/hmr.h>

#include "monitor/imported_monitor.h"
#include "monitor/monitor.h"
#include "util/status.h"

namespace hmr::core {

// The host monitors a domain tries, in order, when neither hmr_domain_attr.cache_monitor
// nor FI_MR_CACHE_MONITOR names one.  memhooks first: it runs inline in the unmapping
// thread and costs that thread least, while userfaultfd makes the unmapping thread wait
// for the monitor thread to read its event.  userfaultfd where memhooks cannot install
// (not x86-64 glibc, or libc already patched, e.g. by UCX's UCM).  When neither starts,
// the domain opens without a host cache and hmr logs both reasons.
inline constexpr const char* kDefaultMonitorOrder[] = {"memhooks", "userfaultfd"};
// The name Environment::cache_monitor has when nothing chose a monitor.
inline constexpr const char* kDefaultMonitorName = "default";

// nullptr for "disabled"; HMR_ENOENT for an unknown name (including "default", which
// names the chain above, not a monitor).  An imported monitor is
// acquired (it cannot be closed until release_monitor).
Result<Monitor*> acquire_monitor(const char* name);
void release_monitor(Monitor* monitor);

Result<MonitorHandle*> import_monitor(const hmr_monitor_ops& ops);
Status close_imported_monitor(MonitorHandle* handle);

}  // namespace hmr::core
