// Process environment, read in one place with one meaning per variable.
#pragma once

#include "core/status.h"

namespace hmr::core {

// A boolean variable: 1/0, yes/no, true/false, on/off (any case); unset gives the default.
// Anything else is an error naming the variable, never a silent guess.
Result<bool> env_bool(const char* name, bool default_value);

struct Environment {
  bool disable_p2p = false;  // FI_HMEM_DISABLE_P2P: the NIC must never DMA device memory
};
Result<Environment> read_environment();

}  // namespace hmr::core
