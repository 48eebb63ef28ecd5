// C ABI: hmr_md_query, what a domain can register and at what cost (UCX md_query).
#include <cstddef>

#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "core/domain.h"
#include "core/packed_rkey.h"
#include "hmem/hmem_registry.h"

using hmr::core::Domain;
using hmr::core::from_handle;

namespace {

constexpr uint64_t kKnownFields = HMR_MD_ATTR_REG_COST;

// Memory interfaces whose runtime is loaded, system always.  Each loaded runtime detects its
// memory, allocates it (hmr_mem_alloc) and has at least one way to the NIC (host VA for its
// host-alloc memory, else dma-buf, peer-direct or a host shadow, as the export policy finds).
uint64_t loaded_ifaces() {
  uint64_t mask = HMR_HMEM_IFACE_BIT(HMR_HMEM_SYSTEM);
  for (int iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    if (iface == HMR_HMEM_SYSTEM) continue;
    if (hmr::hmem::Registry::global().loaded_iface(iface).ok()) mask |= HMR_HMEM_IFACE_BIT(iface);
  }
  return mask;
}

uint64_t md_flags(Domain& domain) {
  const hmr::nic::Capabilities& caps = domain.nic().capabilities();
  uint64_t flags = 0;
  if (domain.cache() != nullptr) flags |= HMR_MD_FLAG_CACHE;
  if (caps.dmabuf_import) flags |= HMR_MD_FLAG_DMABUF;
  if (caps.peer_direct) flags |= HMR_MD_FLAG_PEER_DIRECT;
  if (domain.raw_keys()) flags |= HMR_MD_FLAG_RAW_KEYS;
  if (caps.on_demand_paging) flags |= HMR_MD_FLAG_ODP_ALWAYS;
  // The operations as hmr_md_query_op answers them, without the reasons.
  const struct {
    hmr_md_op op;
    uint64_t flag;
  } operations[] = {{HMR_MD_OP_ODP, HMR_MD_FLAG_ODP},
                    {HMR_MD_OP_MEMORY_WINDOWS, HMR_MD_FLAG_MEMORY_WINDOWS},
                    {HMR_MD_OP_IMPLICIT_ODP, HMR_MD_FLAG_IMPLICIT_ODP},
                    {HMR_MD_OP_ADVISE, HMR_MD_FLAG_ADVISE},
                    {HMR_MD_OP_REREG, HMR_MD_FLAG_REREG},
                    {HMR_MD_OP_INDIRECT, HMR_MD_FLAG_INDIRECT}};
  for (const auto& [op, flag] : operations) {
    if (domain.operation_support(op).available) flags |= flag;
  }
  if (caps.on_demand_paging) flags |= HMR_MD_FLAG_ODP;
  // LOCAL is emulated for hmr's own endpoints only (core/mr_mode.h); where the application's
  // own transfers move the bytes, it is told that the NIC wants local descriptors.
  if ((caps.required_mr_mode & HMR_MR_LOCAL) && !caps.rma) flags |= HMR_MD_FLAG_LOCAL_DESCRIPTORS;
  return flags;
}

}  // namespace

extern "C" {

HMR_API int hmr_md_query(hmr_domain* handle, hmr_md_attr* attr) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    // The first version ended before max_registrations.
    constexpr size_t kFirstVersionSize = offsetof(hmr_md_attr, max_registrations);
    auto checked = hmr::core::read_extensible(attr, kFirstVersionSize, "hmr_md_attr");
    if (!checked.ok()) return hmr::report(checked.status());
    const uint64_t fields = checked->field_mask;
    if (fields & ~kKnownFields) {
      return hmr::report_error(HMR_EBADFLAGS, "hmr_md_attr.field_mask %#llx has unknown bits %#llx",
                               static_cast<unsigned long long>(fields),
                               static_cast<unsigned long long>(fields & ~kKnownFields));
    }
    hmr_md_attr result{};
    result.size = sizeof result;
    result.field_mask = fields;
    result.flags = md_flags(*domain);
    result.max_reg = domain->rules().max_mr_size;
    result.key_size = domain->rules().key_size;
    // What hmr_rkey_pack writes: the fixed header, the key, the checksum; 0 for a NIC whose
    // keys have no packed form.
    if (hmr::core::nic_identity_of(domain->nic().capabilities().name).ok()) {
      result.rkey_packed_size = hmr::core::PackedRkey::size_for(domain->rules().key_size);
    }
    result.reg_mem_types = loaded_ifaces();
    result.detect_mem_types = result.reg_mem_types;
    result.alloc_mem_types = result.reg_mem_types;
    if (fields & HMR_MD_ATTR_REG_COST) {
      hmr::Result<hmr::nic::LinearCost> cost = domain->registration_cost();
      if (!cost.ok()) return hmr::report(cost.status());
      result.reg_cost = {cost->overhead_ns, cost->ns_per_byte};
      result.reg_cost_measured = domain->nic().capabilities().reg_cost ? 0 : 1;
    }
    result.max_registrations = domain->mr_cnt();
    const size_t nic_limit = domain->nic().capabilities().mr_cnt;
    result.max_registrations_source = result.max_registrations == 0 ? "none"
                                      : result.max_registrations == nic_limit ? "nic"
                                                                            : "application";
    result.max_pinned_bytes = domain->pinned_limit().bytes;
    result.max_pinned_bytes_source = domain->pinned_limit().source;
    const Domain::DeviceMemoryPaths paths = domain->device_memory_paths();
    result.dmabuf_mem_types = paths.dmabuf;
    result.peer_direct_mem_types = paths.peer_direct;
    hmr::core::write_extensible(attr, result);
    return 0;
  });
}

}  // extern "C"
