// Domain::device_memory_paths: which device memory this domain's NIC reaches without a host
// shadow, asked of the export decision for every device of each loaded runtime.  A transport
// tells its caller from it whether GPU buffers may be handed over directly (the NCCL
// plugin's NCCL_PTR_CUDA): saying so where every path would fail made the caller's first
// registration of device memory fail instead of staging through host memory.
#include "core/domain.h"
#include "hmem/hmem_registry.h"

namespace hmr::core {

Domain::DeviceMemoryPaths Domain::device_memory_paths() const {
  hmem::Registry& registry = hmem::Registry::global();
  DeviceMemoryPaths paths;
  for (int iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    if (iface == HMR_HMEM_SYSTEM) continue;
    Result<hmem::Iface*> loaded = registry.loaded_iface(iface);
    if (!loaded.ok()) continue;
    Result<std::vector<hmem::DeviceId>> devices = (*loaded)->device_ids();
    if (!devices.ok() || devices->empty()) continue;
    // Every device, not any: a caller cannot tell which device a buffer will be on when it
    // asks, and a device that cannot would fail that buffer's registration.
    bool dmabuf = true, peer_direct = true;
    for (const hmem::DeviceId device : *devices) {
      hmem::PointerInfo memory;
      memory.iface = iface;
      memory.device = device;
      memory.kind = hmem::MemoryKind::device_only;
      Result<hmem::DeviceCapabilities> capabilities = registry.capabilities(iface, device);
      ExportInputs inputs;
      if (capabilities.ok()) {
        inputs.device = &*capabilities;
      } else {
        inputs.device_reason = capabilities.status().reason();
      }
      const ExportPlan plan = plan_export(memory, inputs);
      dmabuf &= plan.verdict[static_cast<size_t>(ExportMode::dmabuf)] == PathVerdict::usable;
      peer_direct &=
          plan.verdict[static_cast<size_t>(ExportMode::peer_direct)] == PathVerdict::usable;
      if (!dmabuf && !peer_direct) break;
    }
    if (dmabuf) paths.dmabuf |= HMR_HMEM_IFACE_BIT(iface);
    if (peer_direct) paths.peer_direct |= HMR_HMEM_IFACE_BIT(iface);
  }
  return paths;
}

}  // namespace hmr::core
