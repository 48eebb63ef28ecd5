#include "util/wait_readable.h"

#include <cerrno>
#include <cstring>
#include <ctime>

#include "util/log.h"

namespace hmr {

void wait_readable(pollfd* fds, nfds_t count, const char* who, bool& warned) {
  for (;;) {
    if (poll(fds, count, -1) >= 0) {
      if (warned) {
        log_message(LogLevel::info, "%s: poll works again", who);
        warned = false;
      }
      return;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (!warned) {
      log_message(LogLevel::warn, "%s: poll failed (%s%s); reading without waiting every "
                  "millisecond until it works again", who, std::strerror(err),
                  err == EINVAL ? ": RLIMIT_NOFILE is below the fds it waits on" : "");
      warned = true;
    }
    const timespec pause{0, 1000 * 1000};
    nanosleep(&pause, nullptr);
    for (nfds_t i = 0; i < count; ++i) fds[i].revents = POLLIN;
    return;
  }
}

}  // namespace hmr
