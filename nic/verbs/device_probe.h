// What one RDMA device can do for memory registration, each answer with its reason: dma-buf
// import, peer-direct (kernel peer-memory clients), on-demand paging, relaxed ordering, offset
// (iova 0) addressing, memory windows, and its limits.  Probing touches nothing the application
// owns: the dma-buf probe registers fd -1, which a device that can import rejects with EBADF
// (it looked the fd up) and one that cannot rejects with EOPNOTSUPP before looking.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hmem/peer_direct.h"
#include "nic/verbs/ibverbs_library.h"
#include "util/status.h"

namespace hmr::verbs {

struct Support {
  bool supported = false;
  std::string reason;
};

struct DeviceProbe {
  std::string name;
  uint64_t max_mr_size = 0;
  int max_mr = 0;
  int max_mw = 0;
  unsigned int device_cap_flags = 0;
  bool atomics = false;
  bool extended_query = false;  // the provider answered ibv_query_device_ex
  uint64_t odp_general_caps = 0;
  uint32_t odp_rc_caps = 0;
  // Who the provider is, as public verbs say it: ibv_device_attr.vendor_id (0x02c9 for
  // mlx4/mlx5, the PCI vendor for EFA 0x1d0f, irdma 0x8086, bnxt_re 0x14e4) and the device's
  // transport (iWARP devices want REMOTE_WRITE on RDMA Read sinks).
  uint32_t vendor_id = 0;
  bool iwarp = false;
  bool mellanox() const { return vendor_id == kMellanoxVendorId; }
  bool efa() const { return vendor_id == kAmazonVendorId; }
  static constexpr uint32_t kMellanoxVendorId = 0x02c9;  // mlx4, mlx5 (Mellanox's OUI)
  static constexpr uint32_t kAmazonVendorId = 0x1d0f;    // EFA (Amazon's PCI vendor id)

  Support dmabuf;
  Support peer_direct;
  Support on_demand_paging;
  Support relaxed_ordering;  // libibverbs can pass the optional access bit
  Support offset_addressing; // registrations at iova 0 (ibv_reg_mr_iova2)
  Support rereg;             // the provider implements ibv_rereg_mr
  Support window_type1;
  Support window_type2;
  hmem::PeerDirectReport peer_memory;
};

// Probes the device of `context`, using `pd` for the dma-buf probe.  `sysfs_root` is where the
// peer-direct hints are read ("" for /).
Result<DeviceProbe> probe_device(const IbverbsLibrary& library, ibv_context* context, ibv_pd* pd,
                                 const std::string& sysfs_root);

// Opens every device in turn (with a PD of its own) and probes it: the per-device report
// behind hmr-info.  Fails only when there is no device list; a device that cannot be opened
// gets a probe whose reasons say so.
Result<std::vector<DeviceProbe>> probe_all_devices(std::shared_ptr<const IbverbsLibrary> library,
                                                   const std::string& sysfs_root);

// "send|recv|write|read" for IBV_ODP_SUPPORT_* bits.
std::string odp_transport_names(uint32_t caps);

}  // namespace hmr::verbs
