// The C ABI's error channel: a negative code returned, the reason kept per thread.
#pragma once

#include "util/status.h"

namespace hmr {

// Records the failure as this thread's last error and returns -code (0 for success).
int report(const Status& status);
// Shorthand for report(make_error(...)) at the C ABI boundary.
int report_error(int code, const char* format, ...) __attribute__((format(printf, 2, 3)));
const char* last_error_text();

}  // namespace hmr
