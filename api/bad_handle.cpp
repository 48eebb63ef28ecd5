#include "api/bad_handle.h"

#include <hmr/hmr.h>

#include "api/last_error.h"
#include "util/object.h"

namespace hmr {

int report_bad_handle(const void* handle, const char* what) {
  if (core::made_before_fork(handle)) {
    const char* name = core::class_name(handle);
    return report_error(HMR_EBADF,
                        "this %s was opened by the parent process before fork(): a forked "
                        "child cannot use it (its NIC resources are the parent's, and its locks "
                        "may be held by parent threads that do not exist here) but may close "
                        "it; open a domain in this process", name);
  }
  return report_error(HMR_EINVAL, "%s", what);
}

int close_bad_handle(void* handle, const char* what) {
  if (!core::made_before_fork(handle)) return report_bad_handle(handle, what);
  core::forget_inherited(handle);  // a forked child lets go of its copy
  return 0;
}

}  // namespace hmr
