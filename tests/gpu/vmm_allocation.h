// A CUDA VMM allocation built the way PyTorch's expandable segments build one: one reserved
// address range, physical segments created separately and mapped back to back from its start,
// read-write access for their device.  Used against the fake driver (tests/hmem) and the real
// one (the GPU lane) alike, through hmr's own driver bindings.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/cuda_symbols.h"
#include "util/status.h"

namespace hmr::testing {

class VmmAllocation {
 public:
  // Reserves room for `segments + spare_segments` segments of `segment_granules` granules each
  // and maps the first `segments`.  `gpu_direct_rdma` sets the allocation flag that dma-buf
  // export and GPUDirect RDMA of VMM memory need.  The caller's thread needs a current context
  // on a real driver.
  static Result<VmmAllocation> create(const cuda::CudaSymbols& driver, int device,
                                      size_t segments, size_t segment_granules = 1,
                                      size_t spare_segments = 1, bool gpu_direct_rdma = true);

  VmmAllocation(VmmAllocation&& other) noexcept;
  VmmAllocation& operator=(VmmAllocation&&) = delete;
  VmmAllocation(const VmmAllocation&) = delete;
  VmmAllocation& operator=(const VmmAllocation&) = delete;
  ~VmmAllocation();

  cuda::CUdeviceptr base() const { return base_; }
  cuda::CUdeviceptr segment(size_t index) const { return base_ + index * segment_size_; }
  size_t segment_size() const { return segment_size_; }

  // Unmaps one segment (leaving a hole) or maps fresh physical memory at a segment's place, on
  // the allocation's device unless `device` names another.
  Status unmap_segment(size_t index);
  Status map_segment(size_t index, int device = -1);

 private:
  VmmAllocation(const cuda::CudaSymbols* driver, int device, bool gpu_direct_rdma)
      : driver_(driver), device_(device), gpu_direct_rdma_(gpu_direct_rdma) {}

  const cuda::CudaSymbols* driver_;  // null once moved from
  int device_;
  bool gpu_direct_rdma_;
  cuda::CUdeviceptr base_ = 0;
  size_t reserved_ = 0;
  size_t segment_size_ = 0;
  std::vector<bool> mapped_;
};

}  // namespace hmr::testing
