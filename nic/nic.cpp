#include "nic/nic.h"

#include <cstring>

#include "nic/sim/sim_nic.h"

namespace hmr::nic {

Status Nic::refresh(Registration&, std::span<const iovec>) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support refreshing a registration",
                    capabilities().name.c_str());
}

Status Nic::set_remote_access(Registration&, RemoteAccess) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support enabling or binding MRs",
                    capabilities().name.c_str());
}

Status Nic::check_local(void*, const void*, size_t, uint64_t) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not move bytes through hmr endpoints",
                    capabilities().name.c_str());
}

Status Nic::remote_access(const RmaRequest&) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not move bytes through hmr endpoints",
                    capabilities().name.c_str());
}

Result<std::unique_ptr<Nic>> open_nic(const char* name, const char* options) {
  if (name == nullptr || std::strcmp(name, "sim") == 0) return sim::SimNic::open(options);
  return make_error(HMR_ENODEV, "unknown NIC adapter '%s' (this build has: sim)", name);
}

}  // namespace hmr::nic
