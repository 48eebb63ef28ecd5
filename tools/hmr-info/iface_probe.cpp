#include "iface_probe.h"

#include <string>

#include "answer.h"
#include "hmem/iface_factory.h"
#include "hmem/symbol_table.h"
#include "hmem/ze_device.h"

namespace hmr::info {
namespace {

JsonValue capability_json(const hmem::Capability& capability) {
  return answer(capability.supported, capability.reason);
}

// HMR_<VENDOR>_LIBRARY for the iface, from the same descriptors the registry loads with.
std::string library_variable(int iface) {
  for (const hmem::IfaceDescriptor& descriptor : hmem::builtin_ifaces()) {
    if (descriptor.iface != iface) continue;
    std::string variable = hmem::library_override_variable(descriptor.vendor);
    // SynapseAI needs its driver library (hl-thunk) too, overridden on its own.
    if (iface == HMR_HMEM_SYNAPSEAI) variable += ", " + hmem::library_override_variable("HLTHUNK");
    return variable;
  }
  return {};
}

// The variable that turns dma-buf off for this iface, and whether it did.
const char* use_dmabuf_variable(int iface) {
  switch (iface) {
    case HMR_HMEM_CUDA: return "FI_HMEM_CUDA_USE_DMABUF";
    case HMR_HMEM_ROCR: return "FI_HMEM_ROCR_USE_DMABUF";
    case HMR_HMEM_ZE: return "FI_HMEM_ZE_USE_DMABUF";
    case HMR_HMEM_NEURON: return "FI_HMEM_NEURON_USE_DMABUF";
    case HMR_HMEM_SYNAPSEAI: return "FI_HMEM_SYNAPSEAI_USE_DMABUF";
  }
  return "";
}

// Whether the NIC may DMA this device's memory directly, and by which paths.  The NIC's own
// side (dma-buf import, peer-memory client) is in the "nics" section.
JsonValue p2p_answer(const hmem::IfaceReport& report, const hmem::DeviceCapabilities& caps,
                     const Result<core::Environment>& environment) {
  if (!environment.ok()) {
    return answer(false, "the environment does not parse, so no domain opens: " +
                             environment.status().reason());
  }
  if (environment.value().disable_p2p) {
    return answer(false, "FI_HMEM_DISABLE_P2P is set: the NIC never accesses device memory "
                         "directly; such memory is registered through a host shadow copy where "
                         "the domain allows copies");
  }
  const bool dmabuf_allowed = environment.value().use_dmabuf[static_cast<size_t>(report.iface)];
  std::string paths;
  if (caps.dmabuf.supported && dmabuf_allowed) paths = "dma-buf";
  if (caps.peer_direct.supported) paths += paths.empty() ? "peer-direct" : " or peer-direct";
  if (!paths.empty()) {
    return answer(true, "through " + paths + ", where the NIC supports it (see nics)");
  }
  const std::string dmabuf_why = caps.dmabuf.supported
                                     ? std::string(use_dmabuf_variable(report.iface)) + "=0"
                                     : "see dmabuf";
  return answer(false, "neither dma-buf (" + dmabuf_why +
                           ") nor peer-direct (see peer_direct): this device's memory reaches "
                           "a NIC only through a host shadow copy");
}

JsonValue device_json(const hmem::IfaceReport& report, const hmem::DeviceCapabilities& caps,
                      const Result<core::Environment>& environment) {
  JsonValue device = JsonValue::object();
  device.set("name", report.name + " " + std::to_string(caps.device.value));
  device.set("iface", report.name);
  device.set("id", caps.device.value);
  if (report.iface == HMR_HMEM_ZE) {
    // Level Zero ids are driver << 16 | device, as fi_hmem_ze_device encodes them.
    Result<hmem::ZeDeviceIndex> index =
        hmem::decode_ze_device(static_cast<int>(static_cast<uint32_t>(caps.device.value)));
    if (index.ok()) {
      device.set("ze_driver", index->driver);
      device.set("ze_device", index->device);
    }
  }
  device.set("pci_bus_id", caps.sys_dev.empty() ? JsonValue() : JsonValue(caps.sys_dev));
  device.set("dmabuf", capability_json(caps.dmabuf));
  device.set("peer_direct", capability_json(caps.peer_direct));
  device.set("p2p", p2p_answer(report, caps, environment));
  device.set("ipc", capability_json(caps.ipc));
  return device;
}

}  // namespace

const char* free_tracking_name(hmem::Iface::FreeTracking tracking) {
  switch (tracking) {
    case hmem::Iface::FreeTracking::none: return "none";
    case hmem::Iface::FreeTracking::alloc_id: return "alloc_id";
    case hmem::Iface::FreeTracking::free_events: return "free_events";
    case hmem::Iface::FreeTracking::explicit_only: return "explicit_only";
  }
  return "unknown";
}

JsonValue ifaces_section(const std::vector<hmem::IfaceReport>& reports) {
  JsonValue ifaces = JsonValue::array();
  for (const hmem::IfaceReport& report : reports) {
    JsonValue iface = JsonValue::object();
    iface.set("name", report.name);
    iface.set("enabled", report.enabled);
    iface.set("built", report.built);
    iface.set("loaded", report.loaded);
    iface.set("library", report.library.empty() ? JsonValue() : JsonValue(report.library));
    if (report.iface != HMR_HMEM_SYSTEM) iface.set("library_variable", library_variable(report.iface));
    iface.set("version", report.version.empty() ? JsonValue() : JsonValue(report.version));
    iface.set("reason", report.reason.empty() ? JsonValue() : JsonValue(report.reason));
    iface.set("resident", report.resident);
    iface.set("devices", report.devices.size());
    iface.set("free_tracking", free_tracking_name(report.free_tracking));
    iface.set("detects_all", report.detects_all);
    ifaces.push(std::move(iface));
  }
  return ifaces;
}

JsonValue devices_section(const std::vector<hmem::IfaceReport>& reports,
                          const Result<core::Environment>& environment) {
  JsonValue devices = JsonValue::array();
  for (const hmem::IfaceReport& report : reports) {
    if (report.iface == HMR_HMEM_SYSTEM || !report.loaded) continue;  // host memory is no device
    for (const hmem::DeviceCapabilities& caps : report.devices) {
      devices.push(device_json(report, caps, environment));
    }
  }
  return devices;
}

}  // namespace hmr::info
