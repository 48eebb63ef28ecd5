// The names of the mr_mode bits ("VIRT_ADDR|PROV_KEY"), for messages and for adapter options
// that state a provider's mode.  The bits themselves are libfabric's (include/hmr/hmr.h).
#pragma once

#include <hmr/hmr.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace hmr::nic {

// Every mr_mode bit hmr knows (libfabric's values).
inline constexpr uint64_t kKnownModeBits =
    HMR_MR_BASIC | HMR_MR_SCALABLE | HMR_MR_LOCAL | HMR_MR_RAW | HMR_MR_VIRT_ADDR |
    HMR_MR_ALLOCATED | HMR_MR_PROV_KEY | HMR_MR_MMU_NOTIFY | HMR_MR_RMA_EVENT |
    HMR_MR_ENDPOINT | HMR_MR_HMEM | HMR_MR_COLLECTIVE;

// "VIRT_ADDR|PROV_KEY" for 0x50; "none" for 0.
std::string mode_names(uint64_t mode);
// Inverse of mode_names, case-insensitive, '|' or ',' separated; used by adapter options.
Result<uint64_t> parse_mode_names(std::string_view names);

}  // namespace hmr::nic
