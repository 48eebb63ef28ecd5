// Which libfabric provider the plugin uses and the NICs it offers: one NCCL device per provider
// NIC (libfabric domain), e.g. tcp's "lo" and "eth0", or the one "shm".
#pragma once

#include <rdma/fabric.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libfabric.h"

namespace hmr::nccl {

struct InfoDeleter {
  const Libfabric* libfabric;
  void operator()(fi_info* info) const { libfabric->freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// Tried in this order when HMR_NCCL_PROVIDER is unset; the first that offers what the plugin
// needs wins.
// shm only when HMR_NCCL_PROVIDER names it: NCCL's 256 MiB all_gathers through it arrived
// corrupted on an H200 (docs/gpu.md, not yet explained), and NCCL never needs a net plugin
// between processes of one host.
inline constexpr const char* kDefaultProviders[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

// What the plugin needs of a provider: reliable datagram endpoints, messages and RMA, 8 bytes
// of remote CQ data (the receive slot, buffer index and size ride in it), and keys hmr can
// hand out (no FI_MR_ENDPOINT, no raw keys).
InfoPtr rdm_rma_hints(const Libfabric& libfabric);

struct ProviderNics {
  std::string provider;          // as libfabric names it, e.g. "tcp;ofi_rxm"
  std::vector<InfoPtr> nics;     // one fi_info per NIC, in libfabric's order
};

// `requested`: HMR_NCCL_PROVIDER's value (empty: the default order).  A provider name without
// ';' also matches its utility-layered form ("tcp" finds "tcp;ofi_rxm").
std::optional<ProviderNics> find_provider_nics(const Libfabric& libfabric,
                                               const std::string& requested, std::string* why);

}  // namespace hmr::nccl
