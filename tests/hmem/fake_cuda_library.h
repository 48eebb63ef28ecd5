// The fake CUDA driver as tests see it: the library at HMR_FAKE_CUDA_PATH (a real libcuda.so.1
// built from tests/fakes/fake_cuda.c), opened once and kept open so its state outlives every
// CudaIface, plus its test-only control entry points.
#pragma once

#include <string>

#include "tests/fakes/fake_cuda_control.h"

namespace hmr::testing {

struct FakeCuda {
  fake_cuda_reset_fn reset = nullptr;
  fake_cuda_alloc_fn alloc = nullptr;
  fake_cuda_free_fn free = nullptr;
  fake_cuda_set_failure_fn set_failure = nullptr;
  fake_cuda_set_device_attribute_fn set_device_attribute = nullptr;
  fake_cuda_call_count_fn call_count = nullptr;
  fake_cuda_last_export_fn last_export = nullptr;
};

const char* fake_cuda_path();
// Aborts the test binary if the fake cannot be loaded: every CUDA test depends on it.
const FakeCuda& fake_cuda();

// Entries in /proc/self/fd: equal before and after means no fd leaked.
int open_fd_count();

}  // namespace hmr::testing
