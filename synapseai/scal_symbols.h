// SCAL (libscal.so), the library SynapseAI manages a Gaudi device's memory pools with, as hmr
// uses it: only to find the "global_hbm" pool of the device the application acquired, so that
// memory the application allocated can be exported through hl-thunk (hbm_pool_dmabuf.h).
// Declared in hmr's own minimal types; prototypes, the pool name and the struct layout follow
// SCAL's scal.h as libfabric's fabtests (hmem_synapseai.c ft_synapseai_get_dmabuf_fd) and UCX's
// Gaudi transport (gaudi_base.c uct_gaudi_base_get_info) use them, and were checked against
// scal.h itself in Habana's SCAL sources (thirty-fourth session): the same prototypes, the
// same 72-byte scal_memory_pool_infoV2, and the result codes below.
#pragma once

#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::synapseai {

inline constexpr int kScalSuccess = 0;  // SCAL_SUCCESS; any other value is a failure
// scal.h's failures (negative), as describe_scal_result names them.
inline constexpr int kScalFailure = -1;          // SCAL_FAILURE
inline constexpr int kScalTimedOut = -2;         // SCAL_TIMED_OUT
inline constexpr int kScalInvalidParam = -4;     // SCAL_INVALID_PARAM
inline constexpr int kScalOutOfMemory = -5;      // SCAL_OUT_OF_MEMORY
inline constexpr int kScalNotReady = -6;         // SCAL_NOT_READY
inline constexpr int kScalResetRequired = -7;    // SCAL_RESET_REQUIRED
inline constexpr int kScalNotFound = -11;        // SCAL_NOT_FOUND
inline constexpr int kScalNotImplemented = -12;  // SCAL_NOT_IMPLEMENTED
inline constexpr const char* kGlobalHbmPool = "global_hbm";

using ScalHandle = void*;      // scal_handle_t, an opaque pointer
using ScalPoolHandle = void*;  // scal_pool_handle_t

// scal.h: struct scal_memory_pool_infoV2, in the same layout.  The pool lives inside one
// device mapping that starts at device_base_allocated_address (what the driver names the
// mapping by); the pool itself starts at device_base_address and is totalSize bytes long.
struct ScalMemoryPoolInfoV2 {
  ScalHandle scal;
  const char* name;
  unsigned idx;
  uint64_t device_base_address;
  void* host_base_address;
  uint32_t core_base_address;  // 0 when the pool is not mapped to the cores
  uint64_t totalSize;
  uint64_t freeSize;
  uint64_t device_base_allocated_address;
};
static_assert(sizeof(ScalMemoryPoolInfoV2) == 72, "scal_memory_pool_infoV2 layout");

// X(member, symbol to dlsym, required|optional, return type, parameter list)
#define HMR_SCAL_SYMBOLS(X)                                                                 \
  /* The SCAL instance SynapseAI made for the device open as `fd` (its acquired device). */ \
  X(scal_get_handle_from_fd, "scal_get_handle_from_fd", required, int,                     \
    (int fd, ScalHandle* scal))                                                             \
  X(scal_get_pool_handle_by_name, "scal_get_pool_handle_by_name", required, int,           \
    (ScalHandle scal, const char* pool_name, ScalPoolHandle* pool))                        \
  X(scal_pool_get_infoV2, "scal_pool_get_infoV2", required, int,                           \
    (ScalPoolHandle pool, ScalMemoryPoolInfoV2* info))

struct ScalSymbols {
#define HMR_SCAL_DECLARE_MEMBER(member, symbol, need, ret, params) ret(*member) params = nullptr;
  HMR_SCAL_SYMBOLS(HMR_SCAL_DECLARE_MEMBER)
#undef HMR_SCAL_DECLARE_MEMBER
};

std::span<const hmem::SymbolSpec> scal_symbol_specs();
void bind_scal_symbols(const hmem::SymbolTable& table, ScalSymbols& symbols);

}  // namespace hmr::synapseai
