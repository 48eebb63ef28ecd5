// hsa_status_t, turned into what hmr reports: an HMR_E* code and words a user can act on.
#pragma once

#include <string>

#include "rocr/rocr_symbols.h"

namespace hmr::rocr {

// The HMR_E* code a failed runtime call maps to (HMR_EIO when nothing closer fits).
int hmr_code_for(hsa_status_t status);

// "HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008: ...)".  Uses the runtime's own text when it has
// hsa_status_string; `symbols` may be only partly bound (or empty) before init.
std::string describe_hsa_status(const RocrSymbols& symbols, hsa_status_t status);

}  // namespace hmr::rocr
