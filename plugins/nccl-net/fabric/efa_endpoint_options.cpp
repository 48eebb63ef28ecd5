#include "efa_endpoint_options.h"

#include <rdma/fi_errno.h>

#include <cstring>

namespace hmr::nccl {

bool is_efa_provider(const char* provider) {
  return provider != nullptr && std::strncmp(provider, "efa", 3) == 0;
}

bool apply_efa_endpoint_options(const Libfabric& libfabric, fid_ep* ep, std::string* notes,
                                std::string* why) {
  struct Option {
    int name;
    const char* text;
  };
  for (const Option option : {Option{kOptCudaApiPermitted, "FI_OPT_CUDA_API_PERMITTED"},
                              Option{kOptSharedMemoryPermitted, "FI_OPT_SHARED_MEMORY_PERMITTED"}}) {
    const bool permitted = false;
    const int rc = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, option.name, &permitted, sizeof permitted);
    if (rc == 0) continue;
    if (rc == -FI_ENOPROTOOPT || rc == -FI_EOPNOTSUPP) {
      if (notes != nullptr) *notes += std::string(notes->empty() ? "" : "; ") + option.text +
                                      " unknown to this provider";
      continue;
    }
    if (why != nullptr) {
      *why = std::string("fi_setopt(") + option.text + ", false) failed: " + libfabric.describe(rc);
    }
    return false;
  }
  return true;
}

}  // namespace hmr::nccl
