#include "hmem/iface.h"

namespace hmr::hmem {

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::host: return "host";
    case MemoryKind::host_alloc: return "host_alloc";
    case MemoryKind::device_only: return "device_only";
    case MemoryKind::managed: return "managed";
  }
  return "unknown";
}

Result<std::vector<DeviceId>> Iface::device_ids() {
  Result<int> count = device_count();
  if (!count.ok()) return count.status();
  std::vector<DeviceId> ids;
  for (int device = 0; device < *count; ++device) ids.push_back(DeviceId{static_cast<uint64_t>(device)});
  return ids;
}

Status Iface::unsupported(const char* operation) const {
  return make_error(HMR_EOPNOTSUPP, "%s memory interface does not support %s", name(), operation);
}

}  // namespace hmr::hmem
