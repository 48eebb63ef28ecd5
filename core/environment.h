// Process environment, read in one place with one meaning per variable.
#pragma once

#include "core/status.h"

namespace hmr::core {

// A boolean variable: 1/0, yes/no, true/false, on/off (any case); unset gives the default.
// Anything else is an error naming the variable, never a silent guess.
Result<bool> env_bool(const char* name, bool default_value);

// An unsigned integer variable; unset gives `default_value`.
Result<uint64_t> env_unsigned(const char* name, uint64_t default_value);

struct Environment {
  bool disable_p2p = false;  // FI_HMEM_DISABLE_P2P: the NIC must never DMA device memory
  // Registration cache defaults for domains that do not set their own.
  uint64_t cache_max_count = 1024;       // FI_MR_CACHE_MAX_COUNT (0 disables caching)
  uint64_t cache_max_size = 0;           // FI_MR_CACHE_MAX_SIZE (0 disables caching)
  const char* cache_monitor = "userfaultfd";  // FI_MR_CACHE_MONITOR
  bool cache_monitor_from_environment = false;
};
Result<Environment> read_environment();

}  // namespace hmr::core
