#include "nic_sysfs.h"

#include <rdma/fi_domain.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace hmr::nccl {
namespace {

std::string real_path(const std::string& path) {
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return {};
  std::string out = resolved;
  free(resolved);
  return out;
}

std::optional<std::string> first_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  return line;
}

// "0123:4567:89ab:cdef" -> 0x0123456789abcdef
std::optional<uint64_t> parse_guid(const std::string& text) {
  uint64_t guid = 0;
  int digits = 0;
  for (char c : text) {
    if (c == ':') continue;
    int value = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (value < 0 || ++digits > 16) return std::nullopt;
    guid = guid << 4 | static_cast<uint64_t>(value);
  }
  if (digits == 0) return std::nullopt;
  return guid;
}

}  // namespace

NicSysfs read_nic_sysfs(const fi_info& info) {
  NicSysfs out;
  const std::string name = info.domain_attr != nullptr && info.domain_attr->name != nullptr
                               ? info.domain_attr->name
                               : "";
  if (info.nic != nullptr && info.nic->bus_attr != nullptr &&
      info.nic->bus_attr->bus_type == FI_BUS_PCI) {
    const fi_pci_attr& pci = info.nic->bus_attr->attr.pci;
    char address[32];
    std::snprintf(address, sizeof address, "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id,
                  pci.device_id, pci.function_id);
    out.pci_path = real_path(std::string("/sys/bus/pci/devices/") + address);
  }
  if (!name.empty() && name.find('/') == std::string::npos) {
    const std::string rdma = "/sys/class/infiniband/" + name;
    const std::string net = "/sys/class/net/" + name;
    if (out.pci_path.empty()) out.pci_path = real_path(rdma + "/device");
    if (out.pci_path.empty()) out.pci_path = real_path(net + "/device");
    if (auto guid = first_line(rdma + "/node_guid")) out.guid = parse_guid(*guid);
    if (auto mac = first_line(net + "/address"); mac && *mac != "00:00:00:00:00:00") out.mac = *mac;
    if (auto speed = first_line(net + "/speed")) {
      const int mbps = std::atoi(speed->c_str());
      if (mbps > 0) out.speed_mbps = mbps;
    }
  }
  if (!out.speed_mbps && info.nic != nullptr && info.nic->link_attr != nullptr &&
      info.nic->link_attr->speed > 0) {
    out.speed_mbps = static_cast<int>(info.nic->link_attr->speed / 1000000);
  }
  return out;
}

}  // namespace hmr::nccl
