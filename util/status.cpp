#include "util/status.h"

#include <cstdio>
#include <new>

#include "util/log.h"

namespace hmr {

Status make_error_v(int code, const char* format, va_list args) {
  char reason[512];
  std::vsnprintf(reason, sizeof reason, format, args);
  log_message(LogLevel::debug, "%s (%s)", reason, hmr_strerror(code));
  try {
    return Status(code, reason);
  } catch (const std::bad_alloc&) {
    // The code still says what failed; the reason says why it has no more.  (Short enough
    // for the string's own room: nothing to allocate.)  A failure is built on paths that
    // must not throw: a NIC's refused deregistration on hmr's reaper thread, a destructor.
    return Status(code, "out of memory");
  }
}

Status make_error(int code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  Status status = make_error_v(code, format, args);
  va_end(args);
  return status;
}

}  // namespace hmr
