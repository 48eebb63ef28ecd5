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
inline constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124;

inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;     // unsigned int
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_BUFFER_ID = 7;       // unsigned long long
// IS_MANAGED is documented as a bool; hmr reads it into a zeroed unsigned int.
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;  // int

inline constexpr unsigned int CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;
inline constexpr unsigned int CU_MEMORYTYPE_ARRAY = 3;
inline constexpr unsigned int CU_MEMORYTYPE_UNIFIED = 4;

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
  X(cuGetErrorString, "cuGetErrorString", optional, (CUresult error, const char** text))

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
