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
  // ENOMEM from a registration is either side of the kernel: pinning past RLIMIT_MEMLOCK
  // (ib_umem_get) or the device out of memory keys or translation tables (max_mr); or, before
  // the kernel, fork protection's madvise of a range that is not all mapped.
  const char* hint = err == ENOMEM
                         ? " (the kernel could not pin the pages — RLIMIT_MEMLOCK, ulimit -l, "
                           "unless the process has CAP_IPC_LOCK — or the device is out of "
                           "memory keys or translation entries: close MRs; under fork "
                           "protection, part of the range may not be mapped)"
                         : "";
  return make_error(hmr_code_for_errno(err), "%s: %s%s", what,
                    err != 0 ? std::strerror(err) : "failed without errno", hint);
}

}  // namespace hmr::verbs
