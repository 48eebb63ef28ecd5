#include "api/last_error.h"

#include <cstdarg>
#include <string>

namespace hmr {
namespace {
thread_local std::string last_error;
}

int report(const Status& status) {
  if (status.ok()) return 0;
  last_error = status.reason();
  return -status.code();
}

int report_error(int code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  Status status = make_error_v(code, format, args);
  va_end(args);
  return report(status);
}

const char* last_error_text() { return last_error.c_str(); }

}  // namespace hmr
