#include "registration/export_policy.h"

#include <cstdio>

#include "hmem/hmem_registry.h"

namespace hmr::core {
namespace {

const char* vendor_variable(int iface) {
  switch (iface) {
    case HMR_HMEM_CUDA: return "FI_HMEM_CUDA_USE_DMABUF";
    case HMR_HMEM_ROCR: return "FI_HMEM_ROCR_USE_DMABUF";
    case HMR_HMEM_ZE: return "FI_HMEM_ZE_USE_DMABUF";
    case HMR_HMEM_NEURON: return "FI_HMEM_NEURON_USE_DMABUF";
    case HMR_HMEM_SYNAPSEAI: return "FI_HMEM_SYNAPSEAI_USE_DMABUF";
  }
  return "FI_HMEM_<VENDOR>_USE_DMABUF";
}

void consider(ExportPlan& plan, ExportMode mode, PathVerdict verdict) {
  plan.verdict[static_cast<size_t>(mode)] = verdict;
  if (verdict == PathVerdict::usable) plan.order[plan.count++] = mode;
}

std::string explain(const ExportInputs& inputs, ExportMode mode, PathVerdict verdict) {
  const hmem::PointerInfo& memory = *inputs.memory;
  switch (verdict) {
    case PathVerdict::usable: return "usable, not tried";
    case PathVerdict::not_applicable: return "not needed for memory the CPU can reach";
    case PathVerdict::p2p_disabled:
      return "FI_HMEM_DISABLE_P2P is set: the NIC must not access device memory directly";
    case PathVerdict::dmabuf_env_disabled:
      return std::string(vendor_variable(memory.iface)) + "=0";
    case PathVerdict::device_cannot:
      if (inputs.device == nullptr) return inputs.device_reason;
      return mode == ExportMode::dmabuf ? inputs.device->dmabuf.reason
                                        : inputs.device->peer_direct.reason;
    case PathVerdict::nic_cannot:
      return "the NIC '" + inputs.nic->name + "' does not " +
             (mode == ExportMode::dmabuf ? "import dma-bufs" : "register device memory peer-direct");
    case PathVerdict::copies_not_allowed:
      return "the domain does not allow copies (open it with HMR_DOMAIN_ALLOW_HMEM_COPY in "
             "hmr_domain_attr.flags)";
  }
  return "unknown";
}

}  // namespace

const char* export_mode_name(ExportMode mode) {
  switch (mode) {
    case ExportMode::host_va: return "host address";
    case ExportMode::dmabuf: return "dma-buf";
    case ExportMode::peer_direct: return "peer-direct";
    case ExportMode::host_shadow: return "host shadow";
  }
  return "unknown";
}

ExportPlan plan_export(const ExportInputs& inputs) {
  ExportPlan plan;
  const hmem::PointerInfo& memory = *inputs.memory;
  if (memory.iface == HMR_HMEM_SYSTEM || memory.kind != hmem::MemoryKind::device_only) {
    consider(plan, ExportMode::host_va, PathVerdict::usable);
    for (ExportMode mode : {ExportMode::dmabuf, ExportMode::peer_direct, ExportMode::host_shadow}) {
      consider(plan, mode, PathVerdict::not_applicable);
    }
    return plan;
  }
  consider(plan, ExportMode::host_va, PathVerdict::not_applicable);
  const Environment& environment = *inputs.environment;
  const bool p2p = !environment.disable_p2p;

  PathVerdict dmabuf = PathVerdict::usable;
  if (!p2p) {
    dmabuf = PathVerdict::p2p_disabled;
  } else if (!environment.use_dmabuf[static_cast<size_t>(memory.iface)]) {
    dmabuf = PathVerdict::dmabuf_env_disabled;
  } else if (inputs.device == nullptr || !inputs.device->dmabuf.supported) {
    dmabuf = PathVerdict::device_cannot;
  } else if (!inputs.nic->dmabuf_import) {
    dmabuf = PathVerdict::nic_cannot;
  }
  consider(plan, ExportMode::dmabuf, dmabuf);

  // Whether the NIC can take a device address is the NIC's to say (its kernel side has the
  // peer-memory client or not); the device's own answer is about the GPU only.
  PathVerdict peer = PathVerdict::usable;
  if (!p2p) {
    peer = PathVerdict::p2p_disabled;
  } else if (!inputs.nic->peer_direct) {
    peer = PathVerdict::nic_cannot;
  }
  consider(plan, ExportMode::peer_direct, peer);

  consider(plan, ExportMode::host_shadow,
           inputs.copies_allowed ? PathVerdict::usable : PathVerdict::copies_not_allowed);
  return plan;
}

std::string describe_no_path(const ExportInputs& inputs, const ExportPlan& plan,
                             const std::array<std::string, kExportModes>& attempt_errors) {
  const hmem::PointerInfo& memory = *inputs.memory;
  char head[192];
  std::snprintf(head, sizeof head, "no way to register %s device %llu memory (%s) on the NIC '%s':",
                hmem::iface_name(memory.iface), static_cast<unsigned long long>(memory.device.value),
                hmem::memory_kind_name(memory.kind), inputs.nic->name.c_str());
  std::string text = head;
  for (ExportMode mode : {ExportMode::dmabuf, ExportMode::peer_direct, ExportMode::host_shadow}) {
    const size_t index = static_cast<size_t>(mode);
    text += std::string(mode == ExportMode::dmabuf ? " " : "; ") + export_mode_name(mode) + ": ";
    text += attempt_errors[index].empty() ? explain(inputs, mode, plan.verdict[index])
                                          : "tried and failed: " + attempt_errors[index];
  }
  return text;
}

}  // namespace hmr::core
