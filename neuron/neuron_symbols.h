// The AWS Neuron runtime (libnrt.so.1) as hmr uses it, declared in hmr's own minimal types so hmr
// builds without the Neuron SDK.  Prototypes, names and values follow nrt.h, nrt_status.h,
// nrt_experimental.h and nrt_version.h of the SDK; enums are int-sized there, so int here is the
// same ABI, and nrt_tensor_t is opaque: only pointers to it cross the ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::neuron {

struct nrt_tensor;  // opaque runtime object
using nrt_tensor_t = nrt_tensor;
using NRT_STATUS = int;

inline constexpr NRT_STATUS NRT_SUCCESS = 0;
inline constexpr NRT_STATUS NRT_FAILURE = 1;
inline constexpr NRT_STATUS NRT_INVALID = 2;
inline constexpr NRT_STATUS NRT_INVALID_HANDLE = 3;
inline constexpr NRT_STATUS NRT_RESOURCE = 4;
inline constexpr NRT_STATUS NRT_TIMEOUT = 5;
inline constexpr NRT_STATUS NRT_HW_ERROR = 6;
inline constexpr NRT_STATUS NRT_QUEUE_FULL = 7;
inline constexpr NRT_STATUS NRT_LOAD_NOT_ENOUGH_NC = 9;
inline constexpr NRT_STATUS NRT_UNSUPPORTED_NEFF_VERSION = 10;
inline constexpr NRT_STATUS NRT_FAIL_HOST_MEM_ALLOC = 11;
inline constexpr NRT_STATUS NRT_UNINITIALIZED = 13;
inline constexpr NRT_STATUS NRT_CLOSED = 14;
inline constexpr NRT_STATUS NRT_QUEUE_EMPTY = 15;

inline constexpr int NRT_TENSOR_PLACEMENT_DEVICE = 0;
inline constexpr int NRT_FRAMEWORK_TYPE_NO_FW = 1;

// nrt_version_t; nrt_get_version takes its size, so a shorter or longer struct stays compatible.
struct NrtVersion {
  uint64_t rt_major = 0;
  uint64_t rt_minor = 0;
  uint64_t rt_patch = 0;
  uint64_t rt_maintenance = 0;
  char rt_detail[128] = {};
  char git_hash[64] = {};
};

// X(member, symbol to dlsym, required|optional, return type, parameter list)
#define HMR_NRT_SYMBOLS(X)                                                                     \
  /* No nrt_init: hmr never claims NeuronCores (docs/vendors.md). */                           \
  X(nrt_get_visible_vnc_count, "nrt_get_visible_vnc_count", required, NRT_STATUS,              \
    (uint32_t* vnc_count))                                                                    \
  X(nrt_tensor_allocate, "nrt_tensor_allocate", required, NRT_STATUS,                          \
    (int placement, int vnc, size_t size, const char* name, nrt_tensor_t** tensor))            \
  X(nrt_tensor_free, "nrt_tensor_free", required, void, (nrt_tensor_t** tensor))              \
  X(nrt_tensor_get_va, "nrt_tensor_get_va", required, void*, (const nrt_tensor_t* tensor))     \
  X(nrt_tensor_read, "nrt_tensor_read", required, NRT_STATUS,                                  \
    (const nrt_tensor_t* tensor, void* buf, size_t offset, size_t size))                       \
  X(nrt_tensor_write, "nrt_tensor_write", required, NRT_STATUS,                                \
    (nrt_tensor_t* tensor, const void* buf, size_t offset, size_t size))                      \
  /* Not in the public headers; exports from any VA and says where it lies in the dma-buf. */  \
  X(nrt_get_dmabuf_fd_v2, "nrt_get_dmabuf_fd_v2", optional, NRT_STATUS,                        \
    (uint64_t va, uint64_t size, int* fd, uint64_t* offset))                                   \
  /* Exports only from the start of a dma-buf object (offset 0). */                            \
  X(nrt_get_dmabuf_fd, "nrt_get_dmabuf_fd", optional, NRT_STATUS,                              \
    (uint64_t va, uint64_t size, int* fd))                                                     \
  X(nrt_memcpy_to_device, "nrt_memcpy_to_device", optional, NRT_STATUS,                        \
    (void* dest, const void* src, size_t size))                                                \
  X(nrt_get_status_as_str, "nrt_get_status_as_str", optional, const char*, (NRT_STATUS status)) \
  X(nrt_get_version, "nrt_get_version", optional, NRT_STATUS, (NrtVersion* version, size_t size))

// The resolved entry points; null only for an optional symbol the runtime lacks.
struct NrtSymbols {
#define HMR_NRT_DECLARE_MEMBER(member, symbol, need, ret, params) ret(*member) params = nullptr;
  HMR_NRT_SYMBOLS(HMR_NRT_DECLARE_MEMBER)
#undef HMR_NRT_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> nrt_symbol_specs();

// Fills `symbols` from a table loaded with nrt_symbol_specs().
void bind_nrt_symbols(const hmem::SymbolTable& table, NrtSymbols& symbols);

}  // namespace hmr::neuron
