#include "util/status.h"

#include <cstdio>

#include "util/log.h"

namespace hmr {

Status make_error_v(int code, const char* format, va_list args) {
  char reason[512];
  std::vsnprintf(reason, sizeof reason, format, args);
  log_message(LogLevel::debug, "%s (%s)", reason, hmr_strerror(code));
  return Status(code, reason);
}

Status make_error(int code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  Status status = make_error_v(code, format, args);
  va_end(args);
  return status;
}

}  // namespace hmr
