// The "ifaces" and "devices" sections: what hmem::Registry found for each memory interface
// and, per device of a loaded runtime, whether its memory can reach a NIC directly.
#pragma once

#include <vector>

#include "hmem/hmem_registry.h"
#include "json_value.h"
#include "util/environment.h"

namespace hmr::info {

const char* free_tracking_name(hmem::Iface::FreeTracking tracking);

JsonValue ifaces_section(const std::vector<hmem::IfaceReport>& reports);

// `environment` decides the effective answers (FI_HMEM_DISABLE_P2P,
// FI_HMEM_<VENDOR>_USE_DMABUF); when it does not parse, the reason says so.
JsonValue devices_section(const std::vector<hmem::IfaceReport>& reports,
                          const Result<core::Environment>& environment);

}  // namespace hmr::info
