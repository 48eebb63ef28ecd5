// C ABI: monitors imported from the application.
#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "monitor/monitor_registry.h"

using hmr::core::from_handle;
using hmr::core::MonitorHandle;

extern "C" {

HMR_API int hmr_monitor_import(const hmr_monitor_ops* ops, hmr_monitor** monitor) {
  return hmr::guarded([&] {
    if (monitor == nullptr) return hmr::report_error(HMR_EINVAL, "monitor output pointer is NULL");
    auto copy = hmr::core::read_extensible(ops, sizeof(hmr_monitor_ops), "hmr_monitor_ops");
    if (!copy.ok()) return hmr::report(copy.status());
    auto handle = hmr::core::import_monitor(*copy);
    if (!handle.ok()) return hmr::report(handle.status());
    *monitor = hmr::core::to_handle<hmr_monitor>(*handle);
    return 0;
  });
}

HMR_API int hmr_monitor_notify(hmr_monitor* handle, const void* addr, size_t len) {
  return hmr::guarded([&] {
    MonitorHandle* monitor = from_handle<MonitorHandle>(handle);
    if (monitor == nullptr) return hmr::report_bad_handle(handle, "not a monitor handle");
    const auto start = reinterpret_cast<uintptr_t>(addr);
    if (len == 0 || start + len < start) {
      return hmr::report_error(HMR_EINVAL, "notify range [%p, +%zu) is empty or wraps", addr, len);
    }
    monitor->monitor()->notify(start, start + len);
    return 0;
  });
}

HMR_API int hmr_monitor_close(hmr_monitor* handle) {
  return hmr::guarded([&] {
    MonitorHandle* monitor = from_handle<MonitorHandle>(handle);
    if (monitor == nullptr) return hmr::close_bad_handle(handle, "not a monitor handle");
    return hmr::report(hmr::core::close_imported_monitor(monitor));
  });
}

}  // extern "C"
