#include "tests/gpu/vmm_allocation.h"

#include <utility>

#include "cuda/cuda_error.h"

namespace hmr::testing {

using namespace hmr::cuda;

namespace {

Status driver_error(const CudaSymbols& driver, const char* call, CUresult result) {
  return make_error(hmr_code_for(result), "%s failed: %s", call,
                    describe_cuda_error(driver, result).c_str());
}

CUmemAllocationProp segment_properties(int device, bool gpu_direct_rdma) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.allocFlags.gpuDirectRDMACapable = gpu_direct_rdma ? 1 : 0;
  return prop;
}

}  // namespace

Result<VmmAllocation> VmmAllocation::create(const CudaSymbols& driver, int device,
                                            size_t segments, size_t segment_granules,
                                            size_t spare_segments, bool gpu_direct_rdma) {
  if (driver.cuMemCreate == nullptr || driver.cuMemAddressReserve == nullptr ||
      driver.cuMemMap == nullptr || driver.cuMemSetAccess == nullptr ||
      driver.cuMemGetAllocationGranularity == nullptr) {
    return make_error(HMR_EOPNOTSUPP, "the CUDA driver has no VMM entry points");
  }
  const CUmemAllocationProp prop = segment_properties(device, gpu_direct_rdma);
  size_t granularity = 0;
  CUresult result =
      driver.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (result != CUDA_SUCCESS) return driver_error(driver, "cuMemGetAllocationGranularity", result);

  VmmAllocation allocation(&driver, device, gpu_direct_rdma);
  allocation.segment_size_ = granularity * segment_granules;
  allocation.reserved_ = allocation.segment_size_ * (segments + spare_segments);
  // Aligned to the granularity, as cuMemMap needs its address to be.
  result = driver.cuMemAddressReserve(&allocation.base_, allocation.reserved_, granularity, 0, 0);
  if (result != CUDA_SUCCESS) {
    allocation.reserved_ = 0;
    return driver_error(driver, "cuMemAddressReserve", result);
  }
  allocation.mapped_.assign(segments + spare_segments, false);
  for (size_t i = 0; i < segments; ++i) {
    HMR_RETURN_IF_ERROR(allocation.map_segment(i));
  }
  return allocation;
}

VmmAllocation::VmmAllocation(VmmAllocation&& other) noexcept
    : driver_(std::exchange(other.driver_, nullptr)),
      device_(other.device_),
      gpu_direct_rdma_(other.gpu_direct_rdma_),
      base_(other.base_),
      reserved_(other.reserved_),
      segment_size_(other.segment_size_),
      mapped_(std::move(other.mapped_)) {}

VmmAllocation::~VmmAllocation() {
  if (driver_ == nullptr) return;
  for (size_t i = 0; i < mapped_.size(); ++i) {
    if (mapped_[i]) (void)unmap_segment(i);
  }
  if (reserved_ != 0) (void)driver_->cuMemAddressFree(base_, reserved_);
}

Status VmmAllocation::map_segment(size_t index, int device) {
  if (index >= mapped_.size() || mapped_[index]) {
    return make_error(HMR_EINVAL, "segment %zu is out of range or already mapped", index);
  }
  if (device < 0) device = device_;
  const CUmemAllocationProp prop = segment_properties(device, gpu_direct_rdma_);
  CUmemGenericAllocationHandle handle = 0;
  CUresult result = driver_->cuMemCreate(&handle, segment_size_, &prop, 0);
  if (result != CUDA_SUCCESS) return driver_error(*driver_, "cuMemCreate", result);
  result = driver_->cuMemMap(segment(index), segment_size_, 0, handle, 0);
  // The mapping keeps the physical memory alive; the handle itself is not needed any more.
  const CUresult released = driver_->cuMemRelease(handle);
  if (result != CUDA_SUCCESS) return driver_error(*driver_, "cuMemMap", result);
  // Marked mapped before a refused release is reported: unmarked, the destructor skipped its
  // unmap, so cuMemAddressFree was refused too and the reservation and mapping leaked.
  mapped_[index] = true;
  if (released != CUDA_SUCCESS) return driver_error(*driver_, "cuMemRelease", released);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  result = driver_->cuMemSetAccess(segment(index), segment_size_, &access, 1);
  if (result != CUDA_SUCCESS) return driver_error(*driver_, "cuMemSetAccess", result);
  return ok_status();
}

Status VmmAllocation::unmap_segment(size_t index) {
  if (index >= mapped_.size() || !mapped_[index]) {
    return make_error(HMR_EINVAL, "segment %zu is out of range or not mapped", index);
  }
  const CUresult result = driver_->cuMemUnmap(segment(index), segment_size_);
  if (result != CUDA_SUCCESS) return driver_error(*driver_, "cuMemUnmap", result);
  mapped_[index] = false;
  return ok_status();
}

}  // namespace hmr::testing
