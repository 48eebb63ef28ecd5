#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace hmr::nccl {
namespace {

std::atomic<ncclDebugLogger_t> g_logger{nullptr};
thread_local char t_last_failure[1024];

// The format comes from the printf-checked entry points below; the attribute tells the
// compiler so it checks their callers instead of rejecting this forward.
void emit_line(ncclDebugLogLevel level, const char* line) {
  if (ncclDebugLogger_t logger = g_logger.load(std::memory_order_acquire)) {
    logger(level, NCCL_NET, __FILE__, __LINE__, "NET/hmr: %s", line);
  } else if (level == NCCL_LOG_WARN) {
    std::fprintf(stderr, "NET/hmr WARN: %s\n", line);
  }
}

__attribute__((format(printf, 2, 0))) void emit(ncclDebugLogLevel level, const char* fmt,
                                                va_list args) {
  char line[1024];
  vsnprintf(line, sizeof line, fmt, args);
  emit_line(level, line);
}

}  // namespace

void set_logger(ncclDebugLogger_t logger) { g_logger.store(logger, std::memory_order_release); }

void log_info(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(NCCL_LOG_INFO, fmt, args);
  va_end(args);
}

void log_warn(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(NCCL_LOG_WARN, fmt, args);
  va_end(args);
}

ncclResult_t fail(ncclResult_t result, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(t_last_failure, sizeof t_last_failure, fmt, args);
  va_end(args);
  emit_line(NCCL_LOG_WARN, t_last_failure);
  return result;
}

const char* last_failure() { return t_last_failure; }
void forget_last_failure() { t_last_failure[0] = '\0'; }

}  // namespace hmr::nccl
