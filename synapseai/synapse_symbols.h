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

// synapse_common_types.h: struct synDeviceInfoV2, in the same layout.  globalHbmBaseAddress is
// where the device's "global_hbm" pool starts: where HCCL's gaudi-direct dma-buf starts.
struct SynDeviceInfoV2 {
  uint64_t sramBaseAddress;
  uint64_t dramBaseAddress;
  uint32_t sramSize;
  uint64_t dramSize;
  uint64_t tpcEnabledMask;
  uint8_t dramEnabled;
  uint32_t deviceId;
  uint32_t fd;
  int deviceType;  // synDeviceType, an int-sized enum
  uint8_t deviceIndex;
  uint64_t globalHbmBaseAddress;
};
static_assert(sizeof(SynDeviceInfoV2) == 72, "synDeviceInfoV2 layout");

// The device this process acquired: SynapseAI gives each process one, as id 0 (HCL asks for it
// as SYN_VALID_DEVICE_ID).
inline constexpr uint32_t kAcquiredSynDevice = 0;

// X(member, symbol to dlsym, required|optional, return type, parameter list)
#define HMR_SYNAPSE_SYMBOLS(X)                                                                 \
  X(synInitialize, "synInitialize", required, synStatus, (void))                               \
  X(synDeviceGetCount, "synDeviceGetCount", required, synStatus, (uint32_t* count))            \
  X(synDriverGetVersion, "synDriverGetVersion", optional, synStatus, (char* version, int len)) \
  X(synDeviceGetInfoV2, "synDeviceGetInfoV2", optional, synStatus,                           \
    (uint32_t device_id, SynDeviceInfoV2* info))                                                \
  /* HCCL's one gaudi-direct dma-buf (hccl_dmabuf.h): address and size are not looked at. */    \
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
