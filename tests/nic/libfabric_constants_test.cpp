// hmr's constants are libfabric's (README: "the same numeric values"), checked at compile time
// against the installed libfabric headers (Debian's 1.17): every hmr constant with a
// libfabric counterpart in them.  One that must differ would be listed in the README; none
// does.  (HMR_MR_DMABUF and HMR_AUTH_KEY are 1.20's FI_MR_DMABUF and 1.18's FI_AUTH_KEY, not in
// these headers: their values are written beside them in hmr.h.)
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

namespace {

// mr_mode bits (fi_domain(3)).
static_assert(HMR_MR_UNSPEC == FI_MR_UNSPEC && HMR_MR_BASIC == FI_MR_BASIC &&
              HMR_MR_SCALABLE == FI_MR_SCALABLE && HMR_MR_LOCAL == FI_MR_LOCAL &&
              HMR_MR_RAW == FI_MR_RAW && HMR_MR_VIRT_ADDR == FI_MR_VIRT_ADDR &&
              HMR_MR_ALLOCATED == FI_MR_ALLOCATED && HMR_MR_PROV_KEY == FI_MR_PROV_KEY &&
              HMR_MR_MMU_NOTIFY == FI_MR_MMU_NOTIFY && HMR_MR_RMA_EVENT == FI_MR_RMA_EVENT &&
              HMR_MR_ENDPOINT == FI_MR_ENDPOINT && HMR_MR_HMEM == FI_MR_HMEM &&
              HMR_MR_COLLECTIVE == FI_MR_COLLECTIVE);
// Access bits (fi_mr(3)).
static_assert(HMR_COLLECTIVE == FI_COLLECTIVE && HMR_READ == FI_READ && HMR_WRITE == FI_WRITE &&
              HMR_RECV == FI_RECV && HMR_SEND == FI_SEND && HMR_REMOTE_READ == FI_REMOTE_READ &&
              HMR_REMOTE_WRITE == FI_REMOTE_WRITE);
// Registration flags.
static_assert(HMR_HMEM_HOST_ALLOC == FI_HMEM_HOST_ALLOC &&
              HMR_HMEM_DEVICE_ONLY == FI_HMEM_DEVICE_ONLY && HMR_RMA_PMEM == FI_RMA_PMEM &&
              HMR_RMA_EVENT == FI_RMA_EVENT && HMR_REG_MR == FI_REG_MR &&
              HMR_KEY_NOTAVAIL == FI_KEY_NOTAVAIL);
// Memory interfaces and threading models.
constexpr bool same(int a, int b) { return a == b; }  // (two enums of different types)
static_assert(same(HMR_HMEM_SYSTEM, FI_HMEM_SYSTEM) && same(HMR_HMEM_CUDA, FI_HMEM_CUDA) &&
              same(HMR_HMEM_ROCR, FI_HMEM_ROCR) && same(HMR_HMEM_ZE, FI_HMEM_ZE) &&
              same(HMR_HMEM_NEURON, FI_HMEM_NEURON) &&
              same(HMR_HMEM_SYNAPSEAI, FI_HMEM_SYNAPSEAI));
static_assert(static_cast<int>(HMR_THREAD_UNSPEC) == FI_THREAD_UNSPEC &&
              static_cast<int>(HMR_THREAD_SAFE) == FI_THREAD_SAFE &&
              static_cast<int>(HMR_THREAD_FID) == FI_THREAD_FID &&
              static_cast<int>(HMR_THREAD_DOMAIN) == FI_THREAD_DOMAIN &&
              static_cast<int>(HMR_THREAD_COMPLETION) == FI_THREAD_COMPLETION &&
              static_cast<int>(HMR_THREAD_ENDPOINT) == FI_THREAD_ENDPOINT);
// The event queue's event.
static_assert(same(HMR_MR_COMPLETE, FI_MR_COMPLETE));
// Error codes (fi_errno(3)).  HMR_ERANGE (errno's ERANGE) has no libfabric name.
static_assert(same(HMR_EPERM, FI_EPERM) && same(HMR_ENOENT, FI_ENOENT) && same(HMR_EIO, FI_EIO) &&
              same(HMR_EBADF, FI_EBADF) && same(HMR_EAGAIN, FI_EAGAIN) &&
              same(HMR_ENOMEM, FI_ENOMEM) && same(HMR_EACCES, FI_EACCES) &&
              same(HMR_EFAULT, FI_EFAULT) && same(HMR_EBUSY, FI_EBUSY) &&
              same(HMR_ENODEV, FI_ENODEV) && same(HMR_EINVAL, FI_EINVAL) &&
              same(HMR_ENOSPC, FI_ENOSPC) && same(HMR_ENOSYS, FI_ENOSYS) &&
              same(HMR_ENODATA, FI_ENODATA) && same(HMR_EOPNOTSUPP, FI_EOPNOTSUPP) &&
              same(HMR_EALREADY, FI_EALREADY) && same(HMR_ETIMEDOUT, FI_ETIMEDOUT) &&
              same(HMR_EKEYREJECTED, FI_EKEYREJECTED) && same(HMR_ETOOSMALL, FI_ETOOSMALL) &&
              same(HMR_EBADFLAGS, FI_EBADFLAGS) && same(HMR_EAVAIL, FI_EAVAIL) &&
              same(HMR_ENOKEY, FI_ENOKEY));

TEST(LibfabricConstants, AreCheckedAtCompileTime) { SUCCEED() << "the static_asserts above"; }

}  // namespace
