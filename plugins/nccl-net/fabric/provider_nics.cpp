#include "provider_nics.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <set>

namespace hmr::nccl {
namespace {

// The remote CQ data the plugin's writes and eager sends carry (wire/write_completion.h,
// wire/eager_data.h): 4 bytes, as EFA and verbs offer; a provider with more (tcp, shm: 8) is
// as good.
constexpr size_t kCqDataBytes = 4;
constexpr size_t kQueueEntries = 256;

bool same_provider(const std::string& wanted, const char* actual) {
  if (wanted == actual) return true;
  // "tcp" asks for the core provider; RDM endpoints over it come layered as "tcp;ofi_rxm".
  return wanted.find(';') == std::string::npos && std::string(actual).rfind(wanted + ";", 0) == 0;
}

std::optional<ProviderNics> query(const Libfabric& libfabric, const std::string& provider,
                                  std::string* why) {
  InfoPtr hints = rdm_rma_hints(libfabric);
  if (!hints) {
    if (why != nullptr) *why = "fi_allocinfo failed";
    return std::nullopt;
  }
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // fi_freeinfo frees it
  // Device memory where the provider can reach it (FI_HMEM); host memory where it cannot.
  fi_info* list = nullptr;
  // Each wish dropped in turn where the provider cannot grant it: device memory (FI_HMEM),
  // then completions that mean delivered (a provider that only has transmit-complete still
  // works with honest peers; only a lying receiver's refusal then goes unseen by the sender).
  int rc = -FI_ENODATA;
  // Not on shm: asked for FI_HMEM, libfabric's shm moves every write, host memory included,
  // through its bounce-buffer path instead of a single cross-memory copy (plugin 14 GB/s
  // against 27 GB/s without it, 1 MiB writes, idle 2-core guest).  NCCL moves device memory
  // between processes of one host with its own transports, not a net plugin's shm.
  const bool shm = provider.rfind("shm", 0) == 0;
  for (const uint64_t hmem : {shm ? uint64_t{0} : uint64_t{FI_HMEM}, uint64_t{0}}) {
    // Not on shm: its writes already complete only after the target copied them, and with
    // the flag asked for, libfabric 1.17's shm stalls on large writes (64 MiB never completed).
    const bool delivery = !shm;
    for (const uint64_t op_flags : {delivery ? uint64_t{FI_DELIVERY_COMPLETE} : uint64_t{0}, uint64_t{0}}) {
      hints->caps = (hints->caps & ~uint64_t{FI_HMEM}) | hmem;
      hints->tx_attr->op_flags = op_flags;
      rc = libfabric.getinfo(libfabric.api_version(), nullptr, nullptr, 0, hints.get(), &list);
      if (rc != -FI_ENODATA) break;
    }
    if (rc != -FI_ENODATA) break;
  }
  if (rc != 0) {
    if (why != nullptr) {
      *why = "provider '" + provider + "' offers no RDM endpoint with RMA and 4-byte CQ data: " +
             libfabric.describe(rc);
    }
    return std::nullopt;
  }
  ProviderNics found;
  std::set<std::string> seen;
  for (fi_info* info = list; info != nullptr; info = info->next) {
    if (!same_provider(provider, info->fabric_attr->prov_name)) continue;
    // libfabric lists a NIC once per address format and utility layering; the first entry,
    // IPv4 before IPv6 for tcp, is the one to use.
    if (!seen.insert(info->domain_attr->name).second) continue;
    if (found.provider.empty()) found.provider = info->fabric_attr->prov_name;
    if (found.provider != info->fabric_attr->prov_name) continue;
    found.nics.emplace_back(libfabric.dupinfo(info), InfoDeleter{&libfabric});
    if (!found.nics.back()) {
      libfabric.freeinfo(list);
      if (why != nullptr) *why = "fi_dupinfo failed";
      return std::nullopt;
    }
  }
  libfabric.freeinfo(list);
  if (found.nics.empty()) {
    if (why != nullptr) *why = "provider '" + provider + "' lists no NIC";
    return std::nullopt;
  }
  return found;
}

}  // namespace

InfoPtr rdm_rma_hints(const Libfabric& libfabric) {
  InfoPtr hints(libfabric.dupinfo(nullptr), InfoDeleter{&libfabric});
  if (!hints) return hints;
  hints->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_WRITE |
                FI_REMOTE_READ;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation context starts with fi_context2
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
  hints->domain_attr->threading = FI_THREAD_SAFE;  // NCCL registers from any thread
  // A write's completion must mean the receiver's NIC accepted it into the announced buffer
  // (as an RDMA write's does on InfiniBand), not only that it left: a receiver that announced
  // a key or range its NIC refuses is then an error here, not a silent loss.  Dropped where
  // the provider cannot (find_provider_nics).
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->domain_attr->cq_data_size = kCqDataBytes;
  // Queues sized for what a comm has in flight (NCCL_NET_MAX_REQUESTS writes and their
  // announcements, a few control messages), not the providers' defaults: tcp;ofi_rxm sizes
  // (and clears) its bounce buffers by them, ~0.4 s per endpoint at its default of 2048.
  hints->tx_attr->size = kQueueEntries;
  hints->rx_attr->size = kQueueEntries;
  hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
  hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
  return hints;
}

std::optional<ProviderNics> find_provider_nics(const Libfabric& libfabric,
                                               const std::string& requested, std::string* why) {
  if (!requested.empty()) return query(libfabric, requested, why);
  std::string reasons;
  for (const char* provider : kDefaultProviders) {
    std::string reason;
    if (auto found = query(libfabric, provider, &reason)) return found;
    reasons += (reasons.empty() ? "" : "; ") + reason;
  }
  if (why != nullptr) *why = "no usable provider (" + reasons + ")";
  return std::nullopt;
}

}  // namespace hmr::nccl
