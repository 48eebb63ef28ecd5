// Level Zero device identity as libfabric encodes it (fi_hmem_ze_device): driver << 16 | device.
#pragma once

#include "util/status.h"

namespace hmr::hmem {

inline constexpr int kZeMaxDriverIndex = 0x7fff;  // keeps the encoding a non-negative int
inline constexpr int kZeMaxDeviceIndex = 0xffff;

struct ZeDeviceIndex {
  int driver = 0;
  int device = 0;
};

Result<int> encode_ze_device(int driver_index, int device_index);
Result<ZeDeviceIndex> decode_ze_device(int encoded);

}  // namespace hmr::hmem
