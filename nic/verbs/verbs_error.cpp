#include "nic/verbs/verbs_error.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

namespace hmr::verbs {

int hmr_code_for_errno(int err) {
  switch (err) {
    case EFAULT: return HMR_EFAULT;
    case ENOMEM: return HMR_ENOMEM;
    case EINVAL: return HMR_EINVAL;
    case EACCES:
    case EPERM: return HMR_EACCES;
    case EOPNOTSUPP:
    case ENOSYS: return HMR_EOPNOTSUPP;
    case EBUSY: return HMR_EBUSY;
    case EBADF: return HMR_EBADF;
    case EAGAIN: return HMR_EAGAIN;
    default: return HMR_EIO;
  }
}

Status verbs_failure(int err, const char* format, ...) {
  char what[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof what, format, args);
  va_end(args);
  const char* hint = err == ENOMEM
                         ? " (pinning needs locked memory: raise RLIMIT_MEMLOCK, ulimit -l)"
                         : "";
  return make_error(hmr_code_for_errno(err), "%s: %s%s", what,
                    err != 0 ? std::strerror(err) : "failed without errno", hint);
}

}  // namespace hmr::verbs
