// A registration request as the domain works with it: every form of fi_mr_reg/regv/regattr
// normalised into one value and validated against the domain's rules, before any lock is
// taken or any NIC is called.
#pragma once

#include <hmr/hmr.h>
#include <sys/uio.h>

#include <cstdint>
#include <optional>

#include "hmem/iface.h"
#include "util/inline_vector.h"
#include "util/status.h"

namespace hmr::core {

struct DomainRules {
  uint64_t mr_mode = 0;      // negotiated: the bits in force
  size_t key_size = 8;
  size_t iov_limit = 1;
  uint64_t max_mr_size = UINT64_MAX;
  bool nic_auth_keys = false;
};

inline constexpr uint64_t kKnownAccess = HMR_COLLECTIVE | HMR_READ | HMR_WRITE | HMR_RECV |
                                         HMR_SEND | HMR_REMOTE_READ | HMR_REMOTE_WRITE |
                                         HMR_MW_BIND;
// Access an MR may have and still share a cached registration: windows bind to one MR's own.
inline constexpr uint64_t kCacheableAccess = kKnownAccess & ~HMR_MW_BIND;
inline constexpr uint64_t kKnownRegistrationFlags = HMR_MR_DMABUF | HMR_HMEM_HOST_ALLOC |
                                                    HMR_HMEM_DEVICE_ONLY | HMR_RMA_PMEM |
                                                    HMR_RMA_EVENT | HMR_AUTH_KEY | HMR_MR_ODP |
                                                    HMR_MR_REPORTED_BASE;

struct MrRequest {
  InlineVector<iovec, 1> segments;      // empty for a dma-buf; one, without an allocation, mostly
  std::optional<hmr_mr_dmabuf> dmabuf;
  uint64_t access = 0;
  uint64_t flags = 0;                   // HMR_MR_* and HMR_HMEM_* for the NIC (not REPORTED_BASE)
  // HMR_MR_REPORTED_BASE: peers address the MR from the base hmr reports, so under 0-based
  // addressing it may share a registration that starts before it.
  bool reported_base = false;
  std::optional<uint64_t> requested_key;  // absent under PROV_KEY
  void* context = nullptr;
  hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
  uint64_t device = 0;
  void* hmem_data = nullptr;
  size_t page_size = 0;
  // What the memory is, once resolved (core/memory_resolution.h): iface and device then
  // agree with it.  Host memory until then.
  hmem::PointerInfo memory;
  // Device memory whose free hmr would not hear (DeviceMonitor::observe said so): registered
  // without the cache.
  bool free_unheard = false;
  // The device cache's invalidation_sequence() before the memory was observed: a registration
  // of it is not filed if the range was invalidated since (RegistrationCache::get's `since`).
  std::optional<uint64_t> device_cache_sequence;

  uint64_t length() const;
  // What the MR adds to hmr_domain_stats.mr_bytes: its length, 0 for implicit ODP (which
  // covers the address space, not bytes of its own).
  uint64_t counted_bytes() const { return implicit_odp() ? 0 : length(); }
  bool device_memory() const { return memory.iface != HMR_HMEM_SYSTEM; }
  bool on_demand_paging() const { return (flags & HMR_MR_ODP) != 0; }
  // HMR_MR_ODP over the whole address space: one segment, address NULL, length SIZE_MAX.
  bool implicit_odp() const;
};

Result<MrRequest> validate_mr_request(const hmr_mr_attr& attr, uint64_t flags,
                                      const DomainRules& rules);
// The checks of registration's segments (hmr_mr_rereg's new translation takes them too).
Status validate_segments(const iovec* iov, size_t count, const DomainRules& rules);

}  // namespace hmr::core
