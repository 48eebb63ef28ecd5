// Which of a provider's NICs become NCCL devices, and the identity each one shows NCCL.
//
// Interfaces: HMR_NCCL_IFNAME takes NCCL_SOCKET_IFNAME's syntax (NCCL's socket transport): a
// comma-separated list of name prefixes; a leading '^' makes it a list to exclude; a leading
// '=' (after any '^') makes the names exact.  Unset, loopback and docker bridges are excluded,
// as NCCL's socket transport and aws-ofi-nccl do (a channel NCCL puts on lo makes a remote
// rank connect to itself), unless nothing else is left.
//
// GUID: NCCL takes a device's guid for the NIC's identity (two devices with one guid are one
// NIC to it).  The RDMA node GUID where there is one; else a hash of the provider, the NIC's
// name, its MAC address where it has one, and this host's identity (/etc/machine-id, else
// the host name), so that eth0 on two hosts are two NICs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hmr::nccl {

class InterfaceFilter {
 public:
  // The filter for `text` (HMR_NCCL_IFNAME); nullopt and `why` when it names nothing.
  static std::optional<InterfaceFilter> parse(const std::string& text, std::string* why);
  // Loopback and docker bridges excluded.
  static InterfaceFilter exclude_loopback_and_docker();

  bool accepts(const std::string& name) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<std::string> names_;
};

// This host's identity for NIC GUIDs: /etc/machine-id's first line, else the host name.
std::string host_identity();

// The GUID of a NIC without an RDMA node GUID (see above); `mac` may be empty.
uint64_t derived_nic_guid(const std::string& provider, const std::string& name,
                          const std::string& mac, const std::string& host);

}  // namespace hmr::nccl
