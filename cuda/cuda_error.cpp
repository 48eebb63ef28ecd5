#include "cuda/cuda_error.h"

#include <cstdio>

namespace hmr::cuda {
namespace {

// The names, because cuGetErrorString gives only prose and an old or fake driver may lack it.
const char* cuda_error_name(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
  }
  return "CUresult";
}

}  // namespace

int hmr_code_for(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return HMR_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: return HMR_EINVAL;
    case CUDA_ERROR_OUT_OF_MEMORY: return HMR_ENOMEM;
    case CUDA_ERROR_STUB_LIBRARY: return HMR_ENOSYS;  // the toolkit's stub, not a driver
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE: return HMR_ENODEV;
    case CUDA_ERROR_NOT_FOUND: return HMR_ENOENT;
    case CUDA_ERROR_NOT_PERMITTED: return HMR_EPERM;
    case CUDA_ERROR_NOT_SUPPORTED: return HMR_EOPNOTSUPP;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return HMR_EALREADY;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return HMR_EINVAL;
    default: return HMR_EIO;
  }
}

std::string describe_cuda_error(const CudaSymbols& symbols, CUresult result) {
  const char* text = nullptr;
  if (symbols.cuGetErrorString == nullptr ||
      symbols.cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) {
    text = "no description from the driver";
  }
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "%s (%d: %s)", cuda_error_name(result), result, text);
  return buffer;
}

}  // namespace hmr::cuda
