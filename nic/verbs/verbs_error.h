// How a failed verb (an errno value) becomes an hmr Status: the HMR_E* code that says what the
// caller can do about it, and a reason that names the verb, the device and the range.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace hmr::verbs {

// EFAULT, ENOMEM, EINVAL, EACCES/EPERM, EOPNOTSUPP/ENOSYS, EBUSY keep their meaning; anything
// else is HMR_EIO.
int hmr_code_for_errno(int err);

// make_error with hmr_code_for_errno(err), the reason followed by ": <strerror(err)>" and, for
// ENOMEM, the locked-memory limit that usually causes it.
Status verbs_failure(int err, const char* format, ...) __attribute__((format(printf, 2, 3)));

// A work completion's status as rdma-core's enum ibv_wc_status names it:
// "IBV_WC_GENERAL_ERR (21)"; "status 42" for a value verbs.h does not list.
std::string describe_wc_status(uint32_t status);

}  // namespace hmr::verbs
