// The CUDA driver API as hmr uses it, declared in hmr's own minimal types so hmr builds without
// the CUDA toolkit.  Prototypes, names and values follow cuda.h (CUDA 13.0); enums are int-sized
// there, so int here is the same ABI.
//
// Symbols with a _v2 suffix are dlsym'ed by that name: the unsuffixed ones keep old 32-bit ABIs.
#pragma once

#include <cstddef>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUdevice_attribute = int;
using CUpointer_attribute = int;
using CUmemRangeHandleType = int;
// Opaque to hmr: it only retains, sets and restores contexts.
struct CUctx_st;
using CUcontext = CUctx_st*;
using CUmemGenericAllocationHandle = unsigned long long;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
inline constexpr CUresult CUDA_ERROR_CONTEXT_IS_DESTROYED = 709;
inline constexpr CUresult CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712;
inline constexpr CUresult CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713;
inline constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED =
    110;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124;

inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;     // unsigned int
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6;     // unsigned int (bool)
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_BUFFER_ID = 7;       // unsigned long long
// IS_MANAGED is documented as a bool; hmr reads it into a zeroed unsigned int.
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;  // int
// The reservation (cuMemAddressReserve) or cuMemAlloc allocation that holds the pointer: for
// VMM memory, not what is mapped.  CUdeviceptr and size_t.
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;
// Whether physical memory is mapped at the pointer (documented as a bool).
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MAPPED = 13;
// The stream-ordered pool (cuMemAllocAsync) the memory came from, or null; a CUmemoryPool.
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18;       // size_t
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19;  // CUdeviceptr
// The physical allocation (cuMemCreate handle) behind the pointer; unsigned long long.
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID = 20;

inline constexpr unsigned int CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;
inline constexpr unsigned int CU_MEMORYTYPE_ARRAY = 3;
inline constexpr unsigned int CU_MEMORYTYPE_UNIFIED = 4;

// cuMemHostAlloc: usable from every context, and mapped into the device address space (with
// unified addressing the device sees it at the host address).
inline constexpr unsigned int CU_MEMHOSTALLOC_PORTABLE = 0x01;
inline constexpr unsigned int CU_MEMHOSTALLOC_DEVICEMAP = 0x02;
inline constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x01;
inline constexpr unsigned int CU_MEMHOSTREGISTER_DEVICEMAP = 0x02;
inline constexpr unsigned int CU_MEM_ATTACH_GLOBAL = 0x1;  // cuMemAllocManaged: any stream

// Virtual memory management (cuMemCreate / cuMemMap), as PyTorch's expandable segments use it.
inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
inline constexpr int CU_MEM_HANDLE_TYPE_NONE = 0x0;
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0;

struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_*
  int id;    // the device ordinal for CU_MEM_LOCATION_TYPE_DEVICE
};
struct CUmemAllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_*
  int requestedHandleTypes;  // CU_MEM_HANDLE_TYPE_*
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;  // needed for dma-buf export and GPUDirect RDMA
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp must match cuda.h");
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_* (an int-sized enum in cuda.h)
};
static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc must match cuda.h");

inline constexpr CUmemRangeHandleType CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1;
// CUDA >= 12.8: map the dma-buf through PCIe BARs rather than C2C; older drivers and some
// systems reject it, so export retries without it.
inline constexpr unsigned long long CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1;

// X(member, symbol to dlsym, required|optional, parameter list)
#define HMR_CUDA_SYMBOLS(X)                                                                     \
  X(cuInit, "cuInit", required, (unsigned int flags))                                          \
  X(cuDriverGetVersion, "cuDriverGetVersion", required, (int* driver_version))                 \
  X(cuDeviceGetCount, "cuDeviceGetCount", required, (int* count))                              \
  X(cuDeviceGet, "cuDeviceGet", required, (CUdevice * device, int ordinal))                    \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", required,                                    \
    (int* value, CUdevice_attribute attribute, CUdevice device))                               \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", required,                                \
    (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr))       \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", required,                                 \
    (CUdeviceptr * base, size_t * size, CUdeviceptr ptr))                                      \
  /* CUDA >= 11.7; without it there is no dma-buf export, but queries still work. */           \
  X(cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", optional,                  \
    (void* handle, CUdeviceptr ptr, size_t size, CUmemRangeHandleType type,                    \
     unsigned long long flags))                                                                \
  X(cuGetErrorString, "cuGetErrorString", optional, (CUresult error, const char** text))      \
  /* SYNC_MEMOPS before the NIC reaches device memory (CudaIface::order_copies_for_nic). */     \
  X(cuPointerSetAttribute, "cuPointerSetAttribute", optional,                                  \
    (const void* value, CUpointer_attribute attribute, CUdeviceptr ptr))                       \
  /* Copies, allocation and host registration run in the device's primary context. */        \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", required,                            \
    (CUcontext * context, CUdevice device))                                                    \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", required, (CUdevice device))    \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", required, (CUcontext * context))                       \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", required, (CUcontext context))                         \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", required,                                                 \
    (CUdeviceptr destination, const void* source, size_t bytes))                               \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", required,                                                 \
    (void* destination, CUdeviceptr source, size_t bytes))                                     \
  X(cuMemAlloc, "cuMemAlloc_v2", required, (CUdeviceptr * ptr, size_t bytes))                  \
  X(cuMemFree, "cuMemFree_v2", required, (CUdeviceptr ptr))                                    \
  X(cuMemHostAlloc, "cuMemHostAlloc", required, (void** ptr, size_t bytes, unsigned int flags)) \
  X(cuMemFreeHost, "cuMemFreeHost", required, (void* ptr))                                     \
  X(cuMemAllocManaged, "cuMemAllocManaged", required,                                          \
    (CUdeviceptr * ptr, size_t bytes, unsigned int flags))                                     \
  X(cuMemHostRegister, "cuMemHostRegister_v2", required,                                       \
    (void* ptr, size_t bytes, unsigned int flags))                                             \
  X(cuMemHostUnregister, "cuMemHostUnregister", required, (void* ptr))                         \
  /* VMM (CUDA >= 10.2): hmr reads VMM ranges through pointer attributes; the tests and the    \
     GPU lane build them with these. */                                                        \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", optional,                  \
    (size_t * granularity, const CUmemAllocationProp* prop, int option))                       \
  X(cuMemCreate, "cuMemCreate", optional,                                                      \
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,      \
     unsigned long long flags))                                                                \
  X(cuMemRelease, "cuMemRelease", optional, (CUmemGenericAllocationHandle handle))             \
  X(cuMemAddressReserve, "cuMemAddressReserve", optional,                                      \
    (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr hint,                       \
     unsigned long long flags))                                                                \
  X(cuMemAddressFree, "cuMemAddressFree", optional, (CUdeviceptr ptr, size_t size))            \
  X(cuMemMap, "cuMemMap", optional,                                                            \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,         \
     unsigned long long flags))                                                                \
  X(cuMemSetAccess, "cuMemSetAccess", optional,                                                \
    (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* descriptors, size_t count))          \
  X(cuMemUnmap, "cuMemUnmap", optional, (CUdeviceptr ptr, size_t size))

// The resolved entry points; null only for an optional symbol the driver lacks.
struct CudaSymbols {
#define HMR_CUDA_DECLARE_MEMBER(member, symbol, need, params) CUresult(*member) params = nullptr;
  HMR_CUDA_SYMBOLS(HMR_CUDA_DECLARE_MEMBER)
#undef HMR_CUDA_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> cuda_symbol_specs();

// Fills `symbols` from a table loaded with cuda_symbol_specs().
void bind_cuda_symbols(const hmem::SymbolTable& table, CudaSymbols& symbols);

}  // namespace hmr::cuda
