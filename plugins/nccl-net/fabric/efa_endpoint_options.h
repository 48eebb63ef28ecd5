// The endpoint options an NCCL net plugin sets on EFA for correctness, as aws-ofi-nccl does
// (nccl_ofi_ofiutils.c) before fi_enable:
// - FI_OPT_CUDA_API_PERMITTED = false: the provider must not call CUDA itself.  NCCL's proxy
//   thread calls the plugin while other threads may hold CUDA's locks or capture a graph, and
//   a provider that copies device memory through cudaMemcpy there can deadlock or break the
//   capture; the plugin registers device memory for GPUDirect RDMA instead.
// - FI_OPT_SHARED_MEMORY_PERMITTED = false: no shortcut through libfabric's shm provider for
//   peers on the same host.  NCCL moves intra-host traffic with its own transports; an shm
//   path would take writes into GPU memory through host copies the flush does not order.
// Neither exists in libfabric 1.17's headers (Debian 12), so their values are written here from
// libfabric's include/rdma/fi_endpoint.h (1.18 and later: the FI_OPT_ENDPOINT option names,
// counted from FI_OPT_MIN_MULTI_RECV = 0: FI_OPT_CUDA_API_PERMITTED is 10,
// FI_OPT_SHARED_MEMORY_PERMITTED 11).  A provider or libfabric that does not know an option
// answers -FI_ENOPROTOOPT or -FI_EOPNOTSUPP: the endpoint is then used as it is (an older EFA
// provider knows neither, and also has no shm shortcut to turn off).
#pragma once

#include <rdma/fi_endpoint.h>

#include <string>

#include "libfabric.h"

namespace hmr::nccl {

inline constexpr int kOptCudaApiPermitted = 10;
inline constexpr int kOptSharedMemoryPermitted = 11;

// Whether `provider` (fi_info's prov_name, e.g. "efa" or "efa-direct") is EFA.
bool is_efa_provider(const char* provider);

// Sets both options to false on `ep` (not yet enabled).  False, with `why`, only when the
// provider refuses a value it knows (anything but "no such option"); `notes` (optional) lists
// the options the provider did not know.
bool apply_efa_endpoint_options(const Libfabric& libfabric, fid_ep* ep, std::string* notes,
                                std::string* why);

}  // namespace hmr::nccl
