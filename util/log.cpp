#include "util/log.h"

#include <strings.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr {
namespace {

LogLevel level_from_environment() {
  const char* value = std::getenv("HMR_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return LogLevel::warn;
  // Case-insensitive, as log levels are elsewhere (DEBUG, Info).
  if (strcasecmp(value, "error") == 0) return LogLevel::error;
  if (strcasecmp(value, "warn") == 0 || strcasecmp(value, "warning") == 0) return LogLevel::warn;
  if (strcasecmp(value, "info") == 0) return LogLevel::info;
  if (strcasecmp(value, "debug") == 0) return LogLevel::debug;
  std::fprintf(stderr, "hmr warn: HMR_LOG_LEVEL='%s' is none of error, warn, info, debug; "
               "logging at warn\n", value);
  return LogLevel::warn;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_environment();
  return level <= threshold;
}

void log_message(LogLevel level, const char* format, ...) {
  if (!log_enabled(level)) return;
  char line[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  std::fprintf(stderr, "hmr %s: %s\n", level_name(level), line);
}

}  // namespace hmr
