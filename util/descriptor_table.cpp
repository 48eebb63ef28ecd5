#include "util/descriptor_table.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

namespace hmr {

bool descriptor_table_full() {
  const int probe = eventfd(0, EFD_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
    return false;
  }
  return errno == EMFILE || errno == ENFILE;
}

uint64_t descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace hmr
