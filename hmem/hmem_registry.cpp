#include "hmem/hmem_registry.h"

#include "hmem/ze_device.h"

namespace hmr::hmem {

const char* iface_name(int iface) {
  switch (iface) {
    case HMR_HMEM_SYSTEM: return "system";
    case HMR_HMEM_CUDA: return "cuda";
    case HMR_HMEM_ROCR: return "rocr";
    case HMR_HMEM_ZE: return "ze";
    case HMR_HMEM_NEURON: return "neuron";
    case HMR_HMEM_SYNAPSEAI: return "synapseai";
  }
  return "unknown";
}

Status check_declared_device(int iface, uint64_t device) {
  const auto as_int = static_cast<int>(static_cast<uint32_t>(device));
  const int index = iface;
  if (index < 0 || index >= HMR_HMEM_IFACE_COUNT) {
    return make_error(HMR_EINVAL, "iface %d is not an hmr_hmem_iface (0..%d)", index,
                      HMR_HMEM_IFACE_COUNT - 1);
  }
  if (iface == HMR_HMEM_SYSTEM) {
    if (device != 0) {
      return make_error(HMR_EINVAL, "device must be 0 for system memory (got %llu)",
                        static_cast<unsigned long long>(device));
    }
    return ok_status();
  }
  if (device > UINT32_MAX || as_int < 0) {
    return make_error(HMR_EINVAL, "%s device %lld is negative or out of range", iface_name(iface),
                      static_cast<long long>(as_int));
  }
  if (iface == HMR_HMEM_ZE) {
    Result<ZeDeviceIndex> decoded = decode_ze_device(as_int);
    if (!decoded.ok()) return decoded.status();
  }
  return make_error(HMR_ENOSYS,
                    "%s memory cannot be registered: this hmr build has no %s interface yet, and "
                    "device memory is never treated as host memory",
                    iface_name(iface), iface_name(iface));
}

}  // namespace hmr::hmem
