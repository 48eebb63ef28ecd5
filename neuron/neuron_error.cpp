#include "neuron/neuron_error.h"

#include <cstdio>

namespace hmr::neuron {
namespace {

// The names, because nrt_get_status_as_str gives prose and an old runtime may lack it.
const char* nrt_status_name(NRT_STATUS status) {
  switch (status) {
    case NRT_SUCCESS: return "NRT_SUCCESS";
    case NRT_FAILURE: return "NRT_FAILURE";
    case NRT_INVALID: return "NRT_INVALID";
    case NRT_INVALID_HANDLE: return "NRT_INVALID_HANDLE";
    case NRT_RESOURCE: return "NRT_RESOURCE";
    case NRT_TIMEOUT: return "NRT_TIMEOUT";
    case NRT_HW_ERROR: return "NRT_HW_ERROR";
    case NRT_QUEUE_FULL: return "NRT_QUEUE_FULL";
    case NRT_LOAD_NOT_ENOUGH_NC: return "NRT_LOAD_NOT_ENOUGH_NC";
    case NRT_UNSUPPORTED_NEFF_VERSION: return "NRT_UNSUPPORTED_NEFF_VERSION";
    case NRT_FAIL_HOST_MEM_ALLOC: return "NRT_FAIL_HOST_MEM_ALLOC";
    case NRT_UNINITIALIZED: return "NRT_UNINITIALIZED";
    case NRT_CLOSED: return "NRT_CLOSED";
    case NRT_QUEUE_EMPTY: return "NRT_QUEUE_EMPTY";
  }
  return "NRT_STATUS";
}

}  // namespace

int hmr_code_for(NRT_STATUS status) {
  switch (status) {
    case NRT_SUCCESS: return HMR_SUCCESS;
    case NRT_INVALID:
    case NRT_INVALID_HANDLE: return HMR_EINVAL;
    case NRT_RESOURCE:
    case NRT_FAIL_HOST_MEM_ALLOC: return HMR_ENOMEM;
    case NRT_TIMEOUT: return HMR_ETIMEDOUT;
    case NRT_LOAD_NOT_ENOUGH_NC: return HMR_ENODEV;
    case NRT_QUEUE_FULL: return HMR_EAGAIN;
    default: return HMR_EIO;
  }
}

int hmr_code_for_dmabuf(NRT_STATUS status) {
  if (status == NRT_SUCCESS) return HMR_SUCCESS;
  return status == NRT_RESOURCE ? HMR_ENOMEM : HMR_EOPNOTSUPP;
}

std::string describe_nrt_status(const NrtSymbols& symbols, NRT_STATUS status) {
  const char* text = nullptr;
  if (symbols.nrt_get_status_as_str != nullptr) text = symbols.nrt_get_status_as_str(status);
  if (text == nullptr) text = "no description from the runtime";
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "%s (%d: %s)", nrt_status_name(status), status, text);
  return buffer;
}

}  // namespace hmr::neuron
