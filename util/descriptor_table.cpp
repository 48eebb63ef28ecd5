#include "util/descriptor_table.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

namespace hmr {

int descriptor_shortage() {
  const int probe = eventfd(0, EFD_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
    return 0;
  }
  return errno == EMFILE || errno == ENFILE ? errno : 0;
}

std::string describe_descriptor_shortage(int shortage) {
  if (shortage == ENFILE) return "the system's file table is full (raise fs.file-max)";
  rlimit limit{};
  std::string bound = "RLIMIT_NOFILE";
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    bound += limit.rlim_cur == RLIM_INFINITY ? std::string(" unlimited")
                                              : " " + std::to_string(limit.rlim_cur);
  }
  return "the process has no file descriptor left (" + bound + ": raise ulimit -n)";
}

}  // namespace hmr
