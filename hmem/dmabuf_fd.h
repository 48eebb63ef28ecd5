// Owner of one exported dma-buf fd.
//
// Close policy (one for every vendor): the DmabufFd that holds the fd closes it with close(2),
// exactly once, when it is destroyed or reset.  A vendor "close dma-buf" call (ROCr's
// hsa_amd_portable_close_dmabuf) is itself a close(2) of the fd, so one policy serves all.
// release() hands the fd to a caller who then owns it (for example a NIC that keeps it, or an
// application that asked for the fd); a moved-from DmabufFd owns nothing and closes nothing.
// close(2) is never retried: on Linux the fd is gone even when close reports EINTR, and a
// retry could close an fd another thread just opened.
#pragma once

#include "util/unique_fd.h"

namespace hmr::hmem {

// The generic owned fd is exactly this policy; the name says what the fd is.
using DmabufFd = UniqueFd;

}  // namespace hmr::hmem
