// The plugin's log: NCCL's logger when init() gave one (lines appear under NCCL_DEBUG=INFO /
// WARN with subsystem NET), stderr for warnings before that.  Every error the plugin returns
// is logged once, where it is classified, with what to do about it.
#pragma once

#include "../abi/nccl_net_common.h"

namespace hmr::nccl {

void set_logger(ncclDebugLogger_t logger);

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Logs a warning and returns `result`, so a failure is one line: return fail(code, "...", ...).
ncclResult_t fail(ncclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// The text of this thread's last fail() ("" before any): what a listener that cannot answer a
// connect request tells the connector (ListenComm).  Copy it before the next fail() (never
// pass it to fail() itself: the buffer would be formatted over its own argument).
const char* last_failure();
void forget_last_failure();

}  // namespace hmr::nccl
