// The export decision: how a registration's memory reaches the NIC.  The one place that
// applies FI_HMEM_DISABLE_P2P and FI_HMEM_<VENDOR>_USE_DMABUF.
//
// Host memory, and runtime memory the CPU can reach (host-alloc, managed), is registered by
// address.  Device-only memory tries, in order:
//   1. dma-buf   the iface exports this device's memory, the NIC imports dma-bufs,
//                FI_HMEM_<VENDOR>_USE_DMABUF is not 0, and P2P is not disabled;
//   2. peer-direct  the NIC registers device addresses itself (nvidia-peermem), P2P allowed;
//   3. host shadow  the domain allows copies (HMR_DOMAIN_ALLOW_HMEM_COPY): hmr owns a host
//                buffer, the NIC registers that, and hmr_mr_sync copies between the two.
// A path that is ruled out records why; a path that is tried and fails at run time (an export
// the driver refuses) falls through to the next.  When none works, the error names each path
// and why it did not.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "hmem/iface.h"
#include "nic/nic.h"
#include "util/environment.h"

namespace hmr::core {

enum class ExportMode : uint8_t { host_va = 0, dmabuf = 1, peer_direct = 2, host_shadow = 3 };
inline constexpr size_t kExportModes = 4;
const char* export_mode_name(ExportMode mode);

// Why a path was not taken.  Kept as codes so the common, successful decision builds no text.
enum class PathVerdict : uint8_t {
  usable,
  not_applicable,       // the memory is reachable by address; no device path is needed
  p2p_disabled,         // FI_HMEM_DISABLE_P2P
  dmabuf_env_disabled,  // FI_HMEM_<VENDOR>_USE_DMABUF=0
  device_cannot,        // the iface says this device's memory cannot take this path
  nic_cannot,           // the NIC does not offer this path
  copies_not_allowed,   // the domain was opened without HMR_DOMAIN_ALLOW_HMEM_COPY
};

struct ExportInputs {
  const hmem::PointerInfo* memory = nullptr;
  const hmem::DeviceCapabilities* device = nullptr;  // null: unknown (the reason is below)
  std::string device_reason;                         // why capabilities are unknown
  const nic::Capabilities* nic = nullptr;
  const Environment* environment = nullptr;
  bool copies_allowed = false;
};

struct ExportPlan {
  std::array<ExportMode, kExportModes> order{};  // the usable paths, in the order to try
  size_t count = 0;
  std::array<PathVerdict, kExportModes> verdict{};  // indexed by ExportMode
};

ExportPlan plan_export(const ExportInputs& inputs);

// "no way to register ...: dma-buf: <why>; peer-direct: <why>; host shadow: <why>", where a
// path that was tried gives the error it failed with (attempt_errors, indexed by ExportMode;
// empty for paths not tried).
std::string describe_no_path(const ExportInputs& inputs, const ExportPlan& plan,
                             const std::array<std::string, kExportModes>& attempt_errors);

}  // namespace hmr::core
