// CudaIface's operations that act on memory: copies, host registration, allocation.  Each runs
// in the primary context of the device that owns the memory, made current only for the call.
#include <cinttypes>

#include "cuda/cuda_error.h"
#include "cuda/cuda_iface.h"

namespace hmr::cuda {

using hmem::DeviceId;
using hmem::MemoryKind;
using hmem::PointerInfo;

namespace {

CUdeviceptr device_address(const void* ptr) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
}

}  // namespace

Result<PointerInfo> CudaIface::device_range(const void* ptr, size_t len, const char* what) {
  Result<PointerInfo> info = query(ptr, len);
  if (!info.ok() && info.status().code() == HMR_ENOENT) {
    return make_error(HMR_EINVAL, "%s: %p is not CUDA memory (copy host memory with memcpy)",
                      what, ptr);
  }
  return info;
}

// The driver call's own CUresult, or why `ordinal`'s context could not be made current.
template <typename Call>
Result<CUresult> CudaIface::in_device_context(int ordinal, Call call) {
  Result<CUcontext> context = contexts_.get(ordinal);
  if (!context.ok()) return context.status();
  Result<ScopedCurrentContext> current = ScopedCurrentContext::enter(symbols_, *context);
  if (!current.ok()) return current.status();
  return call();  // `current` restores the caller's context after this
}

Status CudaIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device_dst == nullptr || host_src == nullptr) {
    return make_error(HMR_EINVAL, "cuda copy to the device from %p to %p: a null pointer",
                      host_src, device_dst);
  }
  if (len == 0) return ok_status();  // as memcpy: nothing to do, and no driver call
  Result<PointerInfo> info = device_range(device_dst, len, "cuda copy to the device");
  if (!info.ok()) return info.status();
  const int ordinal = static_cast<int>(info->device.value);
  Result<CUresult> called = in_device_context(
      ordinal, [&] { return symbols_.cuMemcpyHtoD(device_address(device_dst), host_src, len); });
  if (!called.ok()) return called.status();
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called),
                      "cuMemcpyHtoD(%p, %p, %zu) on cuda device %d failed: %s", device_dst,
                      host_src, len, ordinal, describe_cuda_error(symbols_, *called).c_str());
  }
  return ok_status();
}

Status CudaIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (host_dst == nullptr || device_src == nullptr) {
    return make_error(HMR_EINVAL, "cuda copy from the device from %p to %p: a null pointer",
                      device_src, host_dst);
  }
  if (len == 0) return ok_status();
  Result<PointerInfo> info = device_range(device_src, len, "cuda copy from the device");
  if (!info.ok()) return info.status();
  const int ordinal = static_cast<int>(info->device.value);
  Result<CUresult> called = in_device_context(
      ordinal, [&] { return symbols_.cuMemcpyDtoH(host_dst, device_address(device_src), len); });
  if (!called.ok()) return called.status();
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called),
                      "cuMemcpyDtoH(%p, %p, %zu) on cuda device %d failed: %s", host_dst,
                      device_src, len, ordinal, describe_cuda_error(symbols_, *called).c_str());
  }
  return ok_status();
}

// PORTABLE registrations belong to every context, so the context they are made in only has to
// exist: device 0's primary context serves every device.
Status CudaIface::host_register(void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || len == 0 || address + len < address) {
    return make_error(HMR_EINVAL, "cuda host registration of [%p, +%zu): null, empty or wrapping",
                      ptr, len);
  }
  if (device_count_ == 0) {
    return make_error(HMR_ENODEV, "cuda host registration of %p: the driver sees no device", ptr);
  }
  Result<CUresult> called = in_device_context(0, [&] {
    return symbols_.cuMemHostRegister(ptr, len,
                                      CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  });
  if (!called.ok()) return called.status();
  if (*called == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    return make_error(HMR_EALREADY,
                      "cuMemHostRegister(%p, %zu): part of the range is already registered with "
                      "CUDA; unregister it first or register a disjoint range",
                      ptr, len);
  }
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called), "cuMemHostRegister(%p, %zu) failed: %s", ptr, len,
                      describe_cuda_error(symbols_, *called).c_str());
  }
  return ok_status();
}

Status CudaIface::host_unregister(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr) return make_error(HMR_EINVAL, "cuda host unregistration of a null pointer");
  if (device_count_ == 0) {
    return make_error(HMR_ENODEV, "cuda host unregistration of %p: the driver sees no device",
                      ptr);
  }
  Result<CUresult> called =
      in_device_context(0, [&] { return symbols_.cuMemHostUnregister(ptr); });
  if (!called.ok()) return called.status();
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called),
                      "cuMemHostUnregister(%p) failed: %s (it takes the start of a range "
                      "registered with cuMemHostRegister)",
                      ptr, describe_cuda_error(symbols_, *called).c_str());
  }
  return ok_status();
}

Result<void*> CudaIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL,
                      "cuda allocation on device %" PRIu64 ", which does not exist (this "
                      "process sees %d)",
                      device.value, device_count_);
  }
  if (len == 0) return make_error(HMR_EINVAL, "cuda allocation of 0 bytes");
  if (kind == MemoryKind::host) {
    return make_error(HMR_EINVAL,
                      "cuda allocation of kind host: ordinary process memory is not the "
                      "runtime's to allocate (use device_only, host_alloc or managed)");
  }
  const int ordinal = static_cast<int>(device.value);
  CUdeviceptr allocated = 0;
  void* host_allocated = nullptr;
  const char* call = "cuMemAlloc";
  Result<CUresult> called = in_device_context(ordinal, [&] {
    switch (kind) {
      case MemoryKind::host_alloc:
        call = "cuMemHostAlloc";
        return symbols_.cuMemHostAlloc(&host_allocated, len,
                                       CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      case MemoryKind::managed:
        call = "cuMemAllocManaged";
        return symbols_.cuMemAllocManaged(&allocated, len, CU_MEM_ATTACH_GLOBAL);
      default: return symbols_.cuMemAlloc(&allocated, len);
    }
  });
  if (!called.ok()) return called.status();
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called), "%s of %zu bytes (%s) on cuda device %d failed: %s",
                      call, len, hmem::memory_kind_name(kind), ordinal,
                      describe_cuda_error(symbols_, *called).c_str());
  }
  if (kind == MemoryKind::host_alloc) return host_allocated;
  return reinterpret_cast<void*>(static_cast<uintptr_t>(allocated));
}

Status CudaIface::mem_free(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr) return make_error(HMR_EINVAL, "cuda free of a null pointer");
  Result<PointerInfo> info = device_range(ptr, 1, "cuda free");
  if (!info.ok()) return info.status();
  if (info->base != device_address(ptr)) {
    return make_error(HMR_EINVAL,
                      "cuda free of %p: not the start of its allocation (0x%" PRIx64 ")", ptr,
                      info->base);
  }
  const int ordinal = static_cast<int>(info->device.value);
  const bool host = info->kind == MemoryKind::host_alloc;
  Result<CUresult> called = in_device_context(ordinal, [&] {
    return host ? symbols_.cuMemFreeHost(ptr) : symbols_.cuMemFree(device_address(ptr));
  });
  if (!called.ok()) return called.status();
  if (*called != CUDA_SUCCESS) {
    return make_error(hmr_code_for(*called), "%s(%p) on cuda device %d failed: %s",
                      host ? "cuMemFreeHost" : "cuMemFree", ptr, ordinal,
                      describe_cuda_error(symbols_, *called).c_str());
  }
  return ok_status();
}

}  // namespace hmr::cuda
