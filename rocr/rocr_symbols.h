// The ROCr (HSA) runtime as hmr uses it, declared in hmr's own minimal types so hmr builds
// without ROCm.  Prototypes, names and values follow hsa.h and hsa_ext_amd.h (ROCm 5.2.3, the
// Debian package, plus the dma-buf export that ROCm 5.6 added); enums are int-sized there, so int
// here is the same ABI, and hsa_agent_t / hsa_amd_memory_pool_t are one uint64_t passed by value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::rocr {

using hsa_status_t = int;
using hsa_agent_info_t = int;
using hsa_system_info_t = int;
using hsa_amd_memory_pool_info_t = int;

struct hsa_agent_t {
  uint64_t handle;
};
struct hsa_amd_memory_pool_t {
  uint64_t handle;
};

inline constexpr hsa_status_t HSA_STATUS_SUCCESS = 0x0;
inline constexpr hsa_status_t HSA_STATUS_INFO_BREAK = 0x1;  // an iteration callback stopped early
inline constexpr hsa_status_t HSA_STATUS_ERROR = 0x1000;
inline constexpr hsa_status_t HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001;
inline constexpr hsa_status_t HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003;  // not in one allocation
inline constexpr hsa_status_t HSA_STATUS_ERROR_INVALID_AGENT = 0x1004;
// hsa_init's answer on a machine without a usable GPU (no /dev/kfd), as well as "out of memory".
inline constexpr hsa_status_t HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008;
inline constexpr hsa_status_t HSA_STATUS_ERROR_RESOURCE_FREE = 0x100A;
inline constexpr hsa_status_t HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B;
inline constexpr hsa_status_t HSA_STATUS_ERROR_INVALID_MEMORY_POOL = 40;  // hsa_ext_amd.h

// hsa_system_get_info attributes.
inline constexpr hsa_system_info_t HSA_SYSTEM_INFO_VERSION_MAJOR = 0;       // uint16_t
inline constexpr hsa_system_info_t HSA_SYSTEM_INFO_VERSION_MINOR = 1;       // uint16_t
inline constexpr hsa_system_info_t HSA_AMD_SYSTEM_INFO_BUILD_VERSION = 0x200;  // const char*
// ROCm >= 5.6 (HSA_AMD_INTERFACE_VERSION 1.1): whether the driver can export dma-bufs (bool).
// ROCm 5.2 answers HSA_STATUS_ERROR_INVALID_ARGUMENT.
inline constexpr hsa_system_info_t HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED = 0x204;

// hsa_agent_get_info attributes (hsa.h hsa_agent_info_t, hsa_ext_amd.h hsa_amd_agent_info_t).
inline constexpr hsa_agent_info_t HSA_AGENT_INFO_NAME = 0;     // char[64], NUL-terminated
inline constexpr hsa_agent_info_t HSA_AGENT_INFO_DEVICE = 17;  // hsa_device_type_t (int)
// PCI location: BDFID is bus << 8 | device << 3 | function, DOMAIN the PCI domain (both uint32_t).
inline constexpr hsa_agent_info_t HSA_AMD_AGENT_INFO_BDFID = 0xA006;
inline constexpr hsa_agent_info_t HSA_AMD_AGENT_INFO_DOMAIN = 0xA00F;
inline constexpr size_t kHsaAgentNameSize = 64;

inline constexpr int HSA_DEVICE_TYPE_CPU = 0;
inline constexpr int HSA_DEVICE_TYPE_GPU = 1;

// hsa_amd_memory_pool_get_info attributes and values.
inline constexpr hsa_amd_memory_pool_info_t HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0;  // int enum
inline constexpr hsa_amd_memory_pool_info_t HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1;  // uint32_t
inline constexpr hsa_amd_memory_pool_info_t HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5;  // bool
inline constexpr int HSA_AMD_SEGMENT_GLOBAL = 0;
inline constexpr uint32_t HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1;
inline constexpr uint32_t HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2;
inline constexpr uint32_t HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4;
inline constexpr uint32_t HSA_AMD_MEMORY_POOL_STANDARD_FLAG = 0;  // hsa_amd_memory_pool_allocate

// hsa_amd_pointer_type_t.
inline constexpr int HSA_EXT_POINTER_TYPE_UNKNOWN = 0;  // not ROCr's memory
inline constexpr int HSA_EXT_POINTER_TYPE_HSA = 1;      // allocated from an HSA memory pool
inline constexpr int HSA_EXT_POINTER_TYPE_LOCKED = 2;   // host memory pinned by hsa_amd_memory_lock
inline constexpr int HSA_EXT_POINTER_TYPE_GRAPHICS = 3;  // imported from a graphics API
inline constexpr int HSA_EXT_POINTER_TYPE_IPC = 4;      // imported from another process
inline constexpr int HSA_EXT_POINTER_TYPE_RESERVED_ADDR = 5;  // newer ROCm: VA reserved, no memory
inline constexpr int HSA_EXT_POINTER_TYPE_HSA_VMEM = 6;  // newer ROCm: mapped through hsa_amd_vmem_*

// The caller sets `size` to sizeof; an older runtime lowers it and fills only the fields before.
struct hsa_amd_pointer_info_t {
  uint32_t size;
  int type;  // hsa_amd_pointer_type_t
  void* agentBaseAddress;
  void* hostBaseAddress;
  size_t sizeInBytes;
  void* userData;
  hsa_agent_t agentOwner;
  uint32_t global_flags;
};
static_assert(sizeof(hsa_amd_pointer_info_t) == 56, "hsa_amd_pointer_info_t must match hsa_ext_amd.h");
static_assert(offsetof(hsa_amd_pointer_info_t, sizeInBytes) == 24);
static_assert(offsetof(hsa_amd_pointer_info_t, agentOwner) == 40);

using hsa_agent_callback_t = hsa_status_t (*)(hsa_agent_t agent, void* data);
using hsa_pool_callback_t = hsa_status_t (*)(hsa_amd_memory_pool_t pool, void* data);
using hsa_amd_deallocation_callback_t = void (*)(void* ptr, void* user_data);
using hsa_info_allocator_t = void* (*)(size_t size);

// X(member, symbol to dlsym, required|optional, parameter list); every one returns hsa_status_t.
//
// hsa_amd_portable_close_dmabuf is not loaded: it is a close(2) of the fd, which DmabufFd does
// itself (hmem/dmabuf_fd.h).
#define HMR_ROCR_SYMBOLS(X)                                                                       \
  X(hsa_init, "hsa_init", required, ())                                                          \
  X(hsa_shut_down, "hsa_shut_down", required, ())                                                \
  X(hsa_system_get_info, "hsa_system_get_info", required,                                        \
    (hsa_system_info_t attribute, void* value))                                                  \
  X(hsa_iterate_agents, "hsa_iterate_agents", required,                                          \
    (hsa_agent_callback_t callback, void* data))                                                 \
  X(hsa_agent_get_info, "hsa_agent_get_info", required,                                          \
    (hsa_agent_t agent, hsa_agent_info_t attribute, void* value))                                \
  X(hsa_amd_agent_iterate_memory_pools, "hsa_amd_agent_iterate_memory_pools", required,          \
    (hsa_agent_t agent, hsa_pool_callback_t callback, void* data))                               \
  X(hsa_amd_memory_pool_get_info, "hsa_amd_memory_pool_get_info", required,                      \
    (hsa_amd_memory_pool_t pool, hsa_amd_memory_pool_info_t attribute, void* value))             \
  X(hsa_amd_pointer_info, "hsa_amd_pointer_info", required,                                      \
    (const void* ptr, hsa_amd_pointer_info_t* info, hsa_info_allocator_t alloc,                  \
     uint32_t* num_agents_accessible, hsa_agent_t** accessible))                                 \
  X(hsa_memory_copy, "hsa_memory_copy", required, (void* dst, const void* src, size_t size))     \
  X(hsa_amd_memory_lock, "hsa_amd_memory_lock", required,                                        \
    (void* host_ptr, size_t size, hsa_agent_t* agents, int num_agents, void** agent_ptr))        \
  X(hsa_amd_memory_unlock, "hsa_amd_memory_unlock", required, (void* host_ptr))                  \
  X(hsa_amd_memory_pool_allocate, "hsa_amd_memory_pool_allocate", required,                      \
    (hsa_amd_memory_pool_t pool, size_t size, uint32_t flags, void** ptr))                       \
  X(hsa_amd_memory_pool_free, "hsa_amd_memory_pool_free", required, (void* ptr))                 \
  X(hsa_amd_agents_allow_access, "hsa_amd_agents_allow_access", required,                        \
    (uint32_t num_agents, const hsa_agent_t* agents, const uint32_t* flags, const void* ptr))    \
  X(hsa_amd_register_deallocation_callback, "hsa_amd_register_deallocation_callback", required,  \
    (void* ptr, hsa_amd_deallocation_callback_t callback, void* user_data))                      \
  X(hsa_amd_deregister_deallocation_callback, "hsa_amd_deregister_deallocation_callback",        \
    required, (void* ptr, hsa_amd_deallocation_callback_t callback))                             \
  X(hsa_status_string, "hsa_status_string", optional,                                            \
    (hsa_status_t status, const char** text))                                                    \
  /* ROCm >= 5.6; without it there is no dma-buf export, but queries and copies still work. */   \
  X(hsa_amd_portable_export_dmabuf, "hsa_amd_portable_export_dmabuf", optional,                  \
    (const void* ptr, size_t size, int* dmabuf, uint64_t* offset))

// The resolved entry points; null only for an optional symbol the runtime lacks.
struct RocrSymbols {
#define HMR_ROCR_DECLARE_MEMBER(member, symbol, need, params) hsa_status_t(*member) params = nullptr;
  HMR_ROCR_SYMBOLS(HMR_ROCR_DECLARE_MEMBER)
#undef HMR_ROCR_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> rocr_symbol_specs();

// Fills `symbols` from a table loaded with rocr_symbol_specs().
void bind_rocr_symbols(const hmem::SymbolTable& table, RocrSymbols& symbols);

}  // namespace hmr::rocr
