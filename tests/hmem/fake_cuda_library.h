// The fake CUDA driver as tests see it: the library at HMR_FAKE_CUDA_PATH (a real libcuda.so.1
// built from tests/fakes/fake_cuda*.c), opened once and kept open so its state outlives every
// CudaIface, plus its test-only control entry points and its driver API bound the way hmr binds
// it (for what tests do as "the application": VMM mappings, contexts).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_iface.h"
#include "cuda/cuda_symbols.h"
#include "tests/fakes/fake_cuda_control.h"
#include "tests/hmem/fd_checks.h"

namespace hmr::testing {

struct FakeCuda {
  fake_cuda_reset_fn reset = nullptr;
  fake_cuda_alloc_fn alloc = nullptr;
  fake_cuda_alloc_pooled_fn alloc_pooled = nullptr;
  fake_cuda_free_fn free = nullptr;
  fake_cuda_set_failure_fn set_failure = nullptr;
  fake_cuda_set_failure_once_fn set_failure_once = nullptr;
  fake_cuda_vmm_live_fn vmm_live = nullptr;
  fake_cuda_set_device_attribute_fn set_device_attribute = nullptr;
  fake_cuda_call_count_fn call_count = nullptr;
  fake_cuda_last_export_fn last_export = nullptr;
  fake_cuda_peek_fn peek = nullptr;
  fake_cuda_poke_fn poke = nullptr;
  fake_cuda_host_registration_count_fn host_registration_count = nullptr;
  fake_cuda_primary_retains_fn primary_retains = nullptr;
  fake_cuda_current_context_device_fn current_context_device = nullptr;
};

const char* fake_cuda_path();
// Aborts the test binary if the fake cannot be loaded: every CUDA test depends on it.
const FakeCuda& fake_cuda();
// The fake's driver entry points, bound with hmr's own symbol list.
const cuda::CudaSymbols& fake_cuda_driver();

inline const void* as_pointer(unsigned long long address) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

// A CudaIface on the fake driver, loaded the way a user points hmr at a driver
// (HMR_CUDA_LIBRARY), with the fake reset before each test and its allocations freed after.
class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  void init() { ASSERT_TRUE(iface_.init().ok()); }
  unsigned long long alloc(int device, size_t size, int memory = FAKE_CUDA_MEM_DEVICE);
  void free_allocation(unsigned long long ptr);

  // No peer-memory client under this root, so the answer never depends on the test machine.
  cuda::CudaIface iface_{"/nonexistent/hmr-test-sysfs"};
  std::vector<unsigned long long> allocations_;
};

}  // namespace hmr::testing
