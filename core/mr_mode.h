// mr_mode negotiation between what the application supports and what the NIC requires.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "nic/mr_mode_names.h"
#include "util/status.h"

namespace hmr::core {

// Bits hmr satisfies on the application's behalf: LOCAL (hmr registers what it needs) and
// HMEM (hmr detects iface and device itself).
inline constexpr uint64_t kEmulatedModeBits = HMR_MR_LOCAL | HMR_MR_HMEM;
using nic::kKnownModeBits;

// Replaces BASIC by VIRT_ADDR|ALLOCATED|PROV_KEY and SCALABLE by nothing, as fi_domain(3)
// defines them; rejects unknown bits and BASIC together with SCALABLE.
Result<uint64_t> expand_legacy_mode(uint64_t mode);

// Bits hmr asks for whenever the application supports them: provider keys and virtual
// addresses let many MRs share one cached registration (a requested key is unique per MR,
// and 0-based addressing pins byte 0 to each MR's own start).
inline constexpr uint64_t kSharingModeBits = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;

// The bits the application must honour: what the NIC requires plus the kSharingModeBits the
// NIC can honour (`nic_optional`), as far as the application supports them, minus what hmr
// emulates.  HMR_ENODATA names every bit the NIC needs that the application does not support
// and hmr cannot emulate.
Result<uint64_t> negotiate_mr_mode(uint64_t app_supported, uint64_t nic_required,
                                   uint64_t nic_optional = kSharingModeBits);

}  // namespace hmr::core
