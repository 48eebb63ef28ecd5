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

std::string describe_wc_status(uint32_t status) {
  // enum ibv_wc_status in rdma-core's verbs.h, in its order (0 to 23).
  static constexpr const char* kNames[] = {
      "IBV_WC_SUCCESS",          "IBV_WC_LOC_LEN_ERR",        "IBV_WC_LOC_QP_OP_ERR",
      "IBV_WC_LOC_EEC_OP_ERR",   "IBV_WC_LOC_PROT_ERR",       "IBV_WC_WR_FLUSH_ERR",
      "IBV_WC_MW_BIND_ERR",      "IBV_WC_BAD_RESP_ERR",       "IBV_WC_LOC_ACCESS_ERR",
      "IBV_WC_REM_INV_REQ_ERR",  "IBV_WC_REM_ACCESS_ERR",     "IBV_WC_REM_OP_ERR",
      "IBV_WC_RETRY_EXC_ERR",    "IBV_WC_RNR_RETRY_EXC_ERR",  "IBV_WC_LOC_RDD_VIOL_ERR",
      "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",    "IBV_WC_INV_EECN_ERR",
      "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",         "IBV_WC_RESP_TIMEOUT_ERR",
      "IBV_WC_GENERAL_ERR",      "IBV_WC_TM_ERR",             "IBV_WC_TM_RNDV_INCOMPLETE"};
  if (status >= sizeof kNames / sizeof kNames[0]) return "status " + std::to_string(status);
  return std::string(kNames[status]) + " (" + std::to_string(status) + ")";
}

}  // namespace hmr::verbs
