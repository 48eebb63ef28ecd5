#include "core/mr_mode.h"

#include "nic/mr_mode_names.h"

namespace hmr::core {

Result<uint64_t> expand_legacy_mode(uint64_t mode) {
  if ((mode & ~kKnownModeBits) != 0) {
    return make_error(HMR_EINVAL, "mr_mode 0x%llx has unknown bits 0x%llx",
                      static_cast<unsigned long long>(mode),
                      static_cast<unsigned long long>(mode & ~kKnownModeBits));
  }
  if ((mode & HMR_MR_BASIC) && (mode & HMR_MR_SCALABLE)) {
    return make_error(HMR_EINVAL, "mr_mode cannot be both BASIC and SCALABLE");
  }
  if (mode & HMR_MR_BASIC) mode |= HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;
  return mode & ~(HMR_MR_BASIC | HMR_MR_SCALABLE);
}

Result<uint64_t> negotiate_mr_mode(uint64_t app_supported, uint64_t nic_required,
                                   uint64_t nic_optional) {
  Result<uint64_t> app = expand_legacy_mode(app_supported);
  if (!app.ok()) return app.status();
  const uint64_t missing = nic_required & ~*app & ~kEmulatedModeBits;
  if (missing != 0) {
    return make_error(HMR_ENODATA,
                      "the NIC requires mr_mode %s, which the application does not support "
                      "(it supports %s) and hmr cannot emulate",
                      nic::mode_names(missing).c_str(), nic::mode_names(*app).c_str());
  }
  return (nic_required | (kSharingModeBits & nic_optional)) & *app & ~kEmulatedModeBits;
}

}  // namespace hmr::core
