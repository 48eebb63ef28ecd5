// ze_result_t, turned into what hmr reports: an HMR_E* code and words a user can act on.
#pragma once

#include <string>

#include "ze/ze_symbols.h"

namespace hmr::ze {

// The HMR_E* code a failed Level Zero call maps to (HMR_EIO when nothing closer fits).
int hmr_code_for(ze_result_t result);

// "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)".  API 1.4 has no error text of its own.
std::string describe_ze_result(ze_result_t result);

}  // namespace hmr::ze
