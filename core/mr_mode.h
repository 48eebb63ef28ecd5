// mr_mode negotiation between what the application supports and what the NIC requires.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hmr::core {

// Bits hmr satisfies on the application's behalf: LOCAL (hmr registers what it needs) and
// HMEM (hmr detects iface and device itself).
inline constexpr uint64_t kEmulatedModeBits = HMR_MR_LOCAL | HMR_MR_HMEM;
inline constexpr uint64_t kKnownModeBits =
    HMR_MR_BASIC | HMR_MR_SCALABLE | HMR_MR_LOCAL | HMR_MR_RAW | HMR_MR_VIRT_ADDR |
    HMR_MR_ALLOCATED | HMR_MR_PROV_KEY | HMR_MR_MMU_NOTIFY | HMR_MR_RMA_EVENT |
    HMR_MR_ENDPOINT | HMR_MR_HMEM | HMR_MR_COLLECTIVE;

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

// "VIRT_ADDR|PROV_KEY" for 0x50; "none" for 0.
std::string mode_names(uint64_t mode);
// Inverse of mode_names, case-insensitive, '|' or ',' separated; used by adapter options.
Result<uint64_t> parse_mode_names(std::string_view names);

}  // namespace hmr::core
