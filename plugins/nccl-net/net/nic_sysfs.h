// What sysfs knows about a provider's NIC, for NCCL's topology: the PCI path (NCCL places the
// NIC near its GPUs with it), a GUID and the link speed.  Each is optional; a NIC sysfs does
// not describe (shm, loopback) gets none.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <optional>
#include <string>

namespace hmr::nccl {

struct NicSysfs {
  std::string pci_path;            // e.g. /sys/devices/pci0000:00/0000:00:03.0; empty if unknown
  std::optional<uint64_t> guid;    // the RDMA device's node GUID
  std::optional<int> speed_mbps;
  std::string mac;                 // a network interface's MAC address; empty if none or all 0
};

// `info` names the NIC: its domain name is a network interface (tcp) or an RDMA device
// (verbs, efa); its nic attributes, when the provider fills them, give the PCI address.
NicSysfs read_nic_sysfs(const fi_info& info);

}  // namespace hmr::nccl
