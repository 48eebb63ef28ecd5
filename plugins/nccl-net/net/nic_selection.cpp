#include "nic_selection.h"

#include <unistd.h>

#include <fstream>
#include <span>

#include "../wire/fnv1a.h"

namespace hmr::nccl {

std::optional<InterfaceFilter> InterfaceFilter::parse(const std::string& text, std::string* why) {
  InterfaceFilter filter;
  filter.text_ = text;
  size_t at = 0;
  if (at < text.size() && text[at] == '^') {
    filter.exclude_ = true;
    ++at;
  }
  if (at < text.size() && text[at] == '=') {
    filter.exact_ = true;
    ++at;
  }
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    if (end > at) filter.names_.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (filter.names_.empty()) {
    *why = "HMR_NCCL_IFNAME='" + text + "' names no interface (a list of name prefixes, '^' to "
           "exclude, '=' for exact names, as NCCL_SOCKET_IFNAME)";
    return std::nullopt;
  }
  return filter;
}

InterfaceFilter InterfaceFilter::exclude_loopback_and_docker() {
  std::string unused;
  return *parse("^lo,docker", &unused);
}

bool InterfaceFilter::accepts(const std::string& name) const {
  bool listed = false;
  for (const std::string& n : names_) {
    if (exact_ ? name == n : name.rfind(n, 0) == 0) {
      listed = true;
      break;
    }
  }
  return listed != exclude_;
}

std::string host_identity() {
  std::ifstream machine_id("/etc/machine-id");
  std::string line;
  if (machine_id && std::getline(machine_id, line) && !line.empty()) return line;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') return name;
  return "unknown-host";
}

uint64_t derived_nic_guid(const std::string& provider, const std::string& name,
                          const std::string& mac, const std::string& host) {
  const std::string identity = provider + "/" + name + "/" + mac + "/" + host;
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(identity.data()),
                                       identity.size());
  // 64 bits from two 32-bit hashes with different starting values.
  return uint64_t{fnv1a(bytes)} << 32 | fnv1a(bytes, 0x9e3779b9u);
}

}  // namespace hmr::nccl
