#include "nic/ofi/ofi_error.h"

#include <hmr/hmr.h>
#include <rdma/fi_errno.h>

namespace hmr::nic::ofi {

// The shared numbering is what makes pass-through right; this proves it at compile time.
constexpr bool same(int fi_code, int hmr_code) { return fi_code == hmr_code; }
static_assert(same(FI_EPERM, HMR_EPERM) && same(FI_ENOENT, HMR_ENOENT) && same(FI_EIO, HMR_EIO));
static_assert(same(FI_EBADF, HMR_EBADF) && same(FI_EAGAIN, HMR_EAGAIN));
static_assert(same(FI_ENOMEM, HMR_ENOMEM) && same(FI_EACCES, HMR_EACCES));
static_assert(same(FI_EFAULT, HMR_EFAULT) && same(FI_EBUSY, HMR_EBUSY));
static_assert(same(FI_ENODEV, HMR_ENODEV) && same(FI_EINVAL, HMR_EINVAL));
static_assert(same(FI_ENOSPC, HMR_ENOSPC) && same(FI_ENOSYS, HMR_ENOSYS));
static_assert(same(FI_ENODATA, HMR_ENODATA) && same(FI_EOPNOTSUPP, HMR_EOPNOTSUPP));
static_assert(same(FI_EALREADY, HMR_EALREADY) && same(FI_ETIMEDOUT, HMR_ETIMEDOUT));
static_assert(same(FI_EKEYREJECTED, HMR_EKEYREJECTED) && same(FI_ETOOSMALL, HMR_ETOOSMALL));
static_assert(same(FI_EBADFLAGS, HMR_EBADFLAGS) && same(FI_EAVAIL, HMR_EAVAIL));
static_assert(same(FI_ENOKEY, HMR_ENOKEY));

int hmr_code_for_fi(int fi_return) {
  const int code = fi_return < 0 ? -fi_return : fi_return;
  switch (code) {
    case HMR_EPERM: case HMR_ENOENT: case HMR_EIO: case HMR_EBADF: case HMR_EAGAIN:
    case HMR_ENOMEM: case HMR_EACCES: case HMR_EFAULT: case HMR_EBUSY: case HMR_ENODEV:
    case HMR_EINVAL: case HMR_ENOSPC: case HMR_ERANGE: case HMR_ENOSYS: case HMR_ENODATA:
    case HMR_EOPNOTSUPP: case HMR_EALREADY: case HMR_ETIMEDOUT: case HMR_EKEYREJECTED:
    case HMR_ETOOSMALL: case HMR_EBADFLAGS: case HMR_EAVAIL: case HMR_ENOKEY:
      return code;
    default:
      return HMR_EIO;
  }
}

}  // namespace hmr::nic::ofi
