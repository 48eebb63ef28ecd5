// Diagnostics to stderr, filtered by HMR_LOG_LEVEL (error|warn|info|debug; default warn).
#pragma once

namespace hmr {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace hmr
