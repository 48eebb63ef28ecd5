// C ABI: version, error text, Level Zero device encoding.
#include "api/api_guard.h"
#include "hmem/ze_device.h"

extern "C" {

HMR_API uint32_t hmr_version(void) {
  return HMR_VERSION_MAJOR << 16 | HMR_VERSION_MINOR << 8 | HMR_VERSION_PATCH;
}

HMR_API const char* hmr_strerror(int err) {
  // Negate in unsigned arithmetic: -INT_MIN does not exist.
  const unsigned magnitude = err < 0 ? 0u - static_cast<unsigned>(err) : static_cast<unsigned>(err);
  switch (magnitude) {
    case HMR_SUCCESS: return "success";
    case HMR_EPERM: return "operation not permitted";
    case HMR_ENOENT: return "no such entry";
    case HMR_EIO: return "input/output error";
    case HMR_EBADF: return "bad file descriptor";
    case HMR_EAGAIN: return "resource temporarily unavailable";
    case HMR_ENOMEM: return "out of memory";
    case HMR_EACCES: return "permission denied (remote access error)";
    case HMR_EFAULT: return "bad address";
    case HMR_EBUSY: return "resource busy";
    case HMR_ENODEV: return "no such device";
    case HMR_EINVAL: return "invalid argument";
    case HMR_ENOSPC: return "no space left (limit reached)";
    case HMR_ERANGE: return "value out of range";
    case HMR_ENOSYS: return "function not implemented";
    case HMR_ENODATA: return "no data available (no matching capability)";
    case HMR_EOPNOTSUPP: return "operation not supported";
    case HMR_ETIMEDOUT: return "timed out";
    case HMR_EALREADY: return "operation already in progress";
    case HMR_EKEYREJECTED: return "key rejected";
    case HMR_ETOOSMALL: return "buffer too small";
    case HMR_EAVAIL: return "error available";
    case HMR_EBADFLAGS: return "flags not supported";
    case HMR_ENOKEY: return "required key not available (key in use)";
    default: return "unknown error";
  }
}

HMR_API const char* hmr_last_error(void) { return hmr::last_error_text(); }

HMR_API int hmr_hmem_ze_device(int driver_index, int device_index) {
  auto encoded = hmr::hmem::encode_ze_device(driver_index, device_index);
  if (!encoded.ok()) return hmr::report(encoded.status());
  return *encoded;
}

HMR_API int hmr_hmem_ze_device_decode(int device, int* driver_index, int* device_index) {
  if (driver_index == nullptr || device_index == nullptr) {
    return hmr::report_error(HMR_EINVAL, "driver_index and device_index must not be NULL");
  }
  auto decoded = hmr::hmem::decode_ze_device(device);
  if (!decoded.ok()) return hmr::report(decoded.status());
  *driver_index = decoded->driver;
  *device_index = decoded->device;
  return 0;
}

}  // extern "C"
