// The Habana SynapseAI runtime (libSynapse.so) as hmr uses it, declared in hmr's own minimal
// types so hmr builds without the SynapseAI SDK.  Prototypes, names and values follow
// synapse_api.h, synapse_common_types.h and hccl.h; synStatus is an int-sized enum there.
//
// synDestroy is deliberately absent: it hangs on hosts with no Habana device, and the runtime
// belongs to the application anyway, so hmr never tears it down.
#pragma once

#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::synapseai {

using synStatus = int;

inline constexpr synStatus synSuccess = 0;
inline constexpr synStatus synInvalidArgument = 1;
inline constexpr synStatus synCbFull = 2;
inline constexpr synStatus synOutOfHostMemory = 3;
inline constexpr synStatus synOutOfDeviceMemory = 4;
inline constexpr synStatus synObjectAlreadyInitialized = 5;
inline constexpr synStatus synObjectNotInitialized = 6;
inline constexpr synStatus synCommandSubmissionFailure = 7;
inline constexpr synStatus synNoDeviceFound = 8;
inline constexpr synStatus synDeviceTypeMismatch = 9;
inline constexpr synStatus synDeviceReset = 17;
inline constexpr synStatus synUnsupported = 18;
inline constexpr synStatus synBusy = 22;
inline constexpr synStatus synAllResourcesTaken = 23;
inline constexpr synStatus synUnavailable = 24;
inline constexpr synStatus synFail = 26;
inline constexpr synStatus synOutOfResources = 27;
inline constexpr synStatus synUninitialized = 28;
inline constexpr synStatus synAlreadyInitialized = 29;
inline constexpr synStatus synTimeout = 42;
inline constexpr synStatus synResourceBadUsage = 43;

// X(member, symbol to dlsym, required|optional, return type, parameter list)
#define HMR_SYNAPSE_SYMBOLS(X)                                                                 \
  X(synInitialize, "synInitialize", required, synStatus, (void))                               \
  X(synDeviceGetCount, "synDeviceGetCount", required, synStatus, (uint32_t* count))            \
  X(synDriverGetVersion, "synDriverGetVersion", optional, synStatus, (char* version, int len)) \
  /* HCCL's export of device memory the application allocated: the fd starts at addr. */       \
  X(hcclLookupDMABuff, "hcclLookupDMABuff", optional, int,                                     \
    (uint64_t addr, uint64_t size, int* fd))

// The resolved entry points; null only for an optional symbol the runtime lacks.
struct SynapseSymbols {
#define HMR_SYNAPSE_DECLARE_MEMBER(member, symbol, need, ret, params) ret(*member) params = nullptr;
  HMR_SYNAPSE_SYMBOLS(HMR_SYNAPSE_DECLARE_MEMBER)
#undef HMR_SYNAPSE_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> synapse_symbol_specs();

// Fills `symbols` from a table loaded with synapse_symbol_specs().
void bind_synapse_symbols(const hmem::SymbolTable& table, SynapseSymbols& symbols);

}  // namespace hmr::synapseai
