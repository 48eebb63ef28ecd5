#include "nic/verbs/device_probe.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "nic/verbs/provider_ops.h"

namespace hmr::verbs {
namespace {

constexpr uint64_t kProbeLength = 4096;

Support probe_dmabuf(const IbverbsLibrary& library, ibv_pd* pd) {
  const IbverbsSymbols& verbs = library.symbols();
  if (verbs.reg_dmabuf_mr == nullptr) {
    return {false, "libibverbs '" + library.path() +
                       "' lacks ibv_reg_dmabuf_mr@IBVERBS_1.12 (rdma-core 34 or newer has it)"};
  }
  errno = 0;
  ibv_mr* mr = verbs.reg_dmabuf_mr(pd, 0, kProbeLength, 0, -1, IBV_ACCESS_LOCAL_WRITE);
  const int err = errno;
  if (mr != nullptr) {
    // No working import accepts fd -1; do not trust one that does.
    (void)verbs.dereg_mr(mr);
    return {false, "ibv_reg_dmabuf_mr accepted fd -1, which no working dma-buf import does: "
                   "treated as unsupported"};
  }
  if (err == EBADF) {
    return {true, "the provider and kernel import dma-bufs (ibv_reg_dmabuf_mr with fd -1 failed "
                  "EBADF: the fd was looked up)"};
  }
  if (err == EOPNOTSUPP || err == ENOSYS || err == EPROTONOSUPPORT) {
    return {false, std::string("the provider or kernel cannot import dma-bufs "
                               "(ibv_reg_dmabuf_mr: ") +
                       std::strerror(err) + "); kernel 5.12 and a provider with dma-buf support "
                       "are needed"};
  }
  return {false, std::string("dma-buf import probe failed unexpectedly (ibv_reg_dmabuf_mr with fd "
                             "-1: ") +
                     (err != 0 ? std::strerror(err) : "no errno") + "): treated as unsupported"};
}

Support probe_odp(const DeviceProbe& probe) {
  if (!probe.extended_query) {
    return {false, "the provider has no ibv_query_device_ex, so it reports no on-demand paging"};
  }
  if ((probe.odp_general_caps & IBV_ODP_SUPPORT) == 0) {
    return {false, "the device reports no on-demand paging (odp_caps.general_caps lacks "
                   "IBV_ODP_SUPPORT)"};
  }
  std::string reason = "on-demand paging supported; RC transport: " +
                       odp_transport_names(probe.odp_rc_caps);
  if (probe.odp_general_caps & IBV_ODP_SUPPORT_IMPLICIT) reason += "; implicit ODP too";
  return {true, reason};
}

Support probe_window(const DeviceProbe& probe, ibv_context* context, unsigned int cap_bits,
                     const char* what) {
  if ((probe.device_cap_flags & cap_bits) == 0) {
    return {false, std::string("the device does not advertise ") + what + " memory windows"};
  }
  if (context->ops.alloc_mw == nullptr || context->ops.dealloc_mw == nullptr) {
    return {false, "the provider has no alloc_mw/dealloc_mw"};
  }
  if (probe.max_mw <= 0) return {false, "the device allows no memory windows (max_mw 0)"};
  return {true, std::string(what) + " memory windows (up to " + std::to_string(probe.max_mw) + ")"};
}

// Which providers implement rereg_mr.  One without it gets libibverbs' dummy op
// (libibverbs/dummy_ops.c: EOPNOTSUPP, IBV_REREG_MR_ERR_INPUT): EFA and bnxt_re have none,
// irdma only from rdma-core 49, which a program cannot tell apart from older ones.  mlx4 and
// mlx5 (vendor id 0x02c9, Mellanox's OUI) have had it throughout.
Support probe_rereg(const DeviceProbe& probe) {
  if (probe.mellanox()) {
    return {true, "mlx4/mlx5 (vendor id 0x02c9) implement ibv_rereg_mr"};
  }
  char vendor[16];
  std::snprintf(vendor, sizeof vendor, "%#x", probe.vendor_id);
  return {false, std::string("the provider of ") + probe.name + " (vendor id " + vendor +
                     ") is not known to implement ibv_rereg_mr (EFA and bnxt_re do not, irdma "
                     "only from rdma-core 49): close the MR and register again"};
}

}  // namespace

std::string odp_transport_names(uint32_t caps) {
  static constexpr struct {
    uint32_t bit;
    const char* name;
  } kNames[] = {{IBV_ODP_SUPPORT_SEND, "send"},     {IBV_ODP_SUPPORT_RECV, "recv"},
                {IBV_ODP_SUPPORT_WRITE, "write"},   {IBV_ODP_SUPPORT_READ, "read"},
                {IBV_ODP_SUPPORT_ATOMIC, "atomic"}, {IBV_ODP_SUPPORT_SRQ_RECV, "srq_recv"}};
  std::string names;
  for (const auto& entry : kNames) {
    if ((caps & entry.bit) == 0) continue;
    if (!names.empty()) names += '|';
    names += entry.name;
  }
  return names.empty() ? "none" : names;
}

Result<DeviceProbe> probe_device(const IbverbsLibrary& library, ibv_context* context, ibv_pd* pd,
                                 const std::string& sysfs_root) {
  const IbverbsSymbols& verbs = library.symbols();
  DeviceProbe probe;
  const char* name = verbs.get_device_name(context->device);
  probe.name = name != nullptr ? name : "?";

  ibv_device_attr_ex attr{};
  bool extended = false;
  if (const int err = query_device_ex(verbs, context, &attr, &extended); err != 0) {
    return make_error(HMR_EIO, "ibv_query_device(%s) failed: %s", probe.name.c_str(),
                      std::strerror(err));
  }
  probe.extended_query = extended;
  probe.max_mr_size = attr.orig_attr.max_mr_size;
  probe.max_mr = attr.orig_attr.max_mr;
  probe.max_mw = attr.orig_attr.max_mw;
  probe.device_cap_flags = attr.orig_attr.device_cap_flags;
  probe.atomics = attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE;
  probe.odp_general_caps = attr.odp_caps.general_caps;
  probe.odp_rc_caps = attr.odp_caps.per_transport_caps.rc_odp_caps;
  probe.vendor_id = attr.orig_attr.vendor_id;
  probe.iwarp = context->device->transport_type == IBV_TRANSPORT_IWARP;
  probe.rereg = probe_rereg(probe);

  probe.dmabuf = probe_dmabuf(library, pd);
  probe.peer_memory = hmem::probe_peer_direct(sysfs_root);
  probe.peer_direct = {probe.peer_memory.available, probe.peer_memory.reason};
  if (!probe.peer_direct.supported && probe.efa()) {
    // AWS's EFA kernel driver pins CUDA memory itself through NVIDIA's p2p interface
    // (efa_nv_peermem), with no peer-memory client loaded: a CUDA VA reaches it directly.
    probe.peer_direct = {true, "EFA's kernel driver pins CUDA memory itself (nvidia_p2p), no "
                               "peer-memory client needed"};
  }
  probe.on_demand_paging = probe_odp(probe);
  if (verbs.reg_mr_iova2 != nullptr) {
    probe.relaxed_ordering = {true, "libibverbs passes optional access flags "
                                    "(ibv_reg_mr_iova2); the kernel drops relaxed ordering where "
                                    "the device or platform lacks it"};
    probe.offset_addressing = {true, "ibv_reg_mr_iova2 registers at any iova"};
  } else {
    const std::string missing = "libibverbs '" + library.path() +
                                "' lacks ibv_reg_mr_iova2@IBVERBS_1.8 (rdma-core 28 or newer)";
    probe.relaxed_ordering = {false, missing + ", which optional access flags need"};
    probe.offset_addressing = {false, missing + ": registrations are VA-addressed"};
  }
  probe.window_type1 = probe_window(probe, context, IBV_DEVICE_MEM_WINDOW, "type 1");
  probe.window_type2 = probe_window(
      probe, context, IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B, "type 2");
  return probe;
}

Result<std::vector<DeviceProbe>> probe_all_devices(std::shared_ptr<const IbverbsLibrary> library,
                                                   const std::string& sysfs_root) {
  Result<DeviceList> list = DeviceList::get(library);
  if (!list.ok()) return list.status();
  std::vector<DeviceProbe> probes;
  for (size_t i = 0; i < list->size(); ++i) {
    Result<DeviceHandle> device = DeviceHandle::open(library, list->device(i));
    Result<DeviceProbe> probe =
        device.ok() ? probe_device(*library, device->context(), device->pd(), sysfs_root)
                    : Result<DeviceProbe>(device.status());
    if (probe.ok()) {
      probes.push_back(std::move(*probe));
      continue;
    }
    DeviceProbe unusable;
    unusable.name = list->name(i);
    const std::string why = "device not probed: " + probe.status().reason();
    for (Support* support : {&unusable.dmabuf, &unusable.peer_direct, &unusable.on_demand_paging,
                             &unusable.relaxed_ordering, &unusable.offset_addressing,
                             &unusable.rereg,
                             &unusable.window_type1, &unusable.window_type2}) {
      support->reason = why;
    }
    probes.push_back(std::move(unusable));
  }
  return probes;
}

}  // namespace hmr::verbs
