// What every test of the GPU lane shares: hmr's CUDA iface and the driver bound for the test's
// own calls (the application's side: allocating, mapping, contexts), both on the real
// libcuda.so.1 found the way an application finds it (no HMR_CUDA_LIBRARY override).  Every
// test skips with the reason when there is no usable driver or device; with
// HMR_GPU_LANE_REQUIRE=1 it fails instead.  See tests/gpu/README.md.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "cuda/cuda_iface.h"
#include "cuda/cuda_symbols.h"

namespace hmr::testing {

#define HMR_CU_ASSERT(call) ASSERT_EQ((call), ::hmr::cuda::CUDA_SUCCESS) << #call

inline void* as_device_pointer(cuda::CUdeviceptr address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

// Each test runs with device 0's primary context current, as an application's thread would.
class CudaGpuLane : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  cuda::CudaIface& iface();
  const cuda::CudaSymbols& driver();
  int devices();
  Result<hmem::PointerInfo> query(cuda::CUdeviceptr address, size_t len) {
    return iface().query(as_device_pointer(address), len);
  }
  // Whether `device` has VMM, and whether its VMM memory can be GPUDirect RDMA capable.
  bool vmm_supported(int device, bool* gpu_direct_rdma);

  cuda::CUcontext context_ = nullptr;
};

// The stream-ordered allocator's entry points (cuMemAllocAsync and friends), from the driver
// the lane loaded; nullopt (and a test failure if the driver is not loaded) where it has none.
struct PoolCalls {
  cuda::CUresult (*alloc_async)(cuda::CUdeviceptr*, size_t, void*) = nullptr;
  cuda::CUresult (*free_async)(cuda::CUdeviceptr, void*) = nullptr;
  cuda::CUresult (*synchronize)(void*) = nullptr;  // cuStreamSynchronize
  cuda::CUresult (*default_pool)(void**, int) = nullptr;
  cuda::CUresult (*trim_to)(void*, size_t) = nullptr;
  cuda::CUresult (*set_attribute)(void*, int, void*) = nullptr;
  cuda::CUresult (*get_attribute)(void*, int, void*) = nullptr;
};
std::optional<PoolCalls> pool_calls();
inline constexpr int kPoolReleaseThreshold = 4;  // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (cuuint64_t)

}  // namespace hmr::testing
