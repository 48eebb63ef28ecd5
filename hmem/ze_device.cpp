#include "hmem/ze_device.h"

namespace hmr::hmem {

Result<int> encode_ze_device(int driver_index, int device_index) {
  if (driver_index < 0 || driver_index > kZeMaxDriverIndex) {
    return make_error(HMR_EINVAL, "Level Zero driver index %d is outside 0..%d", driver_index,
                      kZeMaxDriverIndex);
  }
  if (device_index < 0 || device_index > kZeMaxDeviceIndex) {
    return make_error(HMR_EINVAL, "Level Zero device index %d is outside 0..%d", device_index,
                      kZeMaxDeviceIndex);
  }
  return driver_index << 16 | device_index;
}

Result<ZeDeviceIndex> decode_ze_device(int encoded) {
  if (encoded < 0) {
    return make_error(HMR_EINVAL, "Level Zero device %d is negative: not a driver << 16 | device "
                      "encoding", encoded);
  }
  return ZeDeviceIndex{encoded >> 16, encoded & 0xffff};
}

}  // namespace hmr::hmem
