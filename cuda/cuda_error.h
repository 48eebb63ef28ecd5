// CUresult, turned into what hmr reports: an HMR_E* code and words a user can act on.
#pragma once

#include <string>

#include "cuda/cuda_symbols.h"

namespace hmr::cuda {

// The HMR_E* code a failed driver call maps to (HMR_EIO when nothing closer fits).
int hmr_code_for(CUresult result);

// "CUDA_ERROR_NO_DEVICE (100: no CUDA-capable device is detected)".  Uses the driver's own text
// when it has cuGetErrorString; `symbols` may be only partly bound (or empty) before init.
std::string describe_cuda_error(const CudaSymbols& symbols, CUresult result);

}  // namespace hmr::cuda
