#include "rocr/rocr_error.h"

#include <cstdio>

namespace hmr::rocr {
namespace {

// The names, because hsa_status_string gives them only inside prose and a fake may lack it.
const char* hsa_status_name(hsa_status_t status) {
  switch (status) {
    case HSA_STATUS_SUCCESS: return "HSA_STATUS_SUCCESS";
    case HSA_STATUS_INFO_BREAK: return "HSA_STATUS_INFO_BREAK";
    case HSA_STATUS_ERROR: return "HSA_STATUS_ERROR";
    case HSA_STATUS_ERROR_INVALID_ARGUMENT: return "HSA_STATUS_ERROR_INVALID_ARGUMENT";
    case HSA_STATUS_ERROR_INVALID_ALLOCATION: return "HSA_STATUS_ERROR_INVALID_ALLOCATION";
    case HSA_STATUS_ERROR_INVALID_AGENT: return "HSA_STATUS_ERROR_INVALID_AGENT";
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES: return "HSA_STATUS_ERROR_OUT_OF_RESOURCES";
    case HSA_STATUS_ERROR_RESOURCE_FREE: return "HSA_STATUS_ERROR_RESOURCE_FREE";
    case HSA_STATUS_ERROR_NOT_INITIALIZED: return "HSA_STATUS_ERROR_NOT_INITIALIZED";
    case HSA_STATUS_ERROR_INVALID_MEMORY_POOL: return "HSA_STATUS_ERROR_INVALID_MEMORY_POOL";
  }
  return "hsa_status_t";
}

}  // namespace

int hmr_code_for(hsa_status_t status) {
  switch (status) {
    case HSA_STATUS_SUCCESS: return HMR_SUCCESS;
    case HSA_STATUS_ERROR_INVALID_ARGUMENT:
    case HSA_STATUS_ERROR_INVALID_ALLOCATION: return HMR_EINVAL;
    case HSA_STATUS_ERROR_INVALID_AGENT: return HMR_ENODEV;
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES: return HMR_ENOMEM;
    default: return HMR_EIO;
  }
}

std::string describe_hsa_status(const RocrSymbols& symbols, hsa_status_t status) {
  const char* text = nullptr;
  if (symbols.hsa_status_string == nullptr ||
      symbols.hsa_status_string(status, &text) != HSA_STATUS_SUCCESS || text == nullptr) {
    text = "no description from the runtime";
  }
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, "%s (0x%x: %s)", hsa_status_name(status),
                static_cast<unsigned>(status), text);
  return buffer;
}

}  // namespace hmr::rocr
