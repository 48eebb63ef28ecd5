// The oneAPI Level Zero API as hmr uses it, declared in hmr's own minimal types so hmr builds
// without the Level Zero headers.  Prototypes, names, values and layouts follow ze_api.h (API 1.4,
// loader 1.8.12, the Debian package); enums are 32-bit there, so int here is the same ABI.  Every
// structure starts with {stype, pNext}; static_asserts pin the offsets hmr relies on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::ze {

using ze_result_t = int;
using ze_structure_type_t = int;

// Opaque handles: hmr only passes them back.
struct ze_driver_object;
struct ze_device_object;
struct ze_context_object;
struct ze_command_list_object;
struct ze_event_object;
using ze_driver_handle_t = ze_driver_object*;
using ze_device_handle_t = ze_device_object*;
using ze_context_handle_t = ze_context_object*;
using ze_command_list_handle_t = ze_command_list_object*;
using ze_event_handle_t = ze_event_object*;

inline constexpr ze_result_t ZE_RESULT_SUCCESS = 0;
inline constexpr ze_result_t ZE_RESULT_NOT_READY = 1;
inline constexpr ze_result_t ZE_RESULT_ERROR_DEVICE_LOST = 0x70000001;
inline constexpr ze_result_t ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY = 0x70000002;
inline constexpr ze_result_t ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY = 0x70000003;
inline constexpr ze_result_t ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS = 0x70010000;
inline constexpr ze_result_t ZE_RESULT_ERROR_NOT_AVAILABLE = 0x70010001;
// zeInit's answer when the loader finds no driver (this machine: no Intel GPU driver).
inline constexpr ze_result_t ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNSUPPORTED_VERSION = 0x78000002;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = 0x78000003;
inline constexpr ze_result_t ZE_RESULT_ERROR_INVALID_ARGUMENT = 0x78000004;
inline constexpr ze_result_t ZE_RESULT_ERROR_INVALID_NULL_HANDLE = 0x78000005;
inline constexpr ze_result_t ZE_RESULT_ERROR_INVALID_NULL_POINTER = 0x78000007;
inline constexpr ze_result_t ZE_RESULT_ERROR_INVALID_SIZE = 0x78000008;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNSUPPORTED_SIZE = 0x78000009;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT = 0x7800000a;
inline constexpr ze_result_t ZE_RESULT_ERROR_INVALID_ENUMERATION = 0x7800000c;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION = 0x7800000d;
// An address in no allocation of the context: compute-runtime's answer for the free space of a
// USM pool (ze_api.h 1.13 and later).
inline constexpr ze_result_t ZE_RESULT_ERROR_ADDRESS_NOT_FOUND = 0x78000021;
inline constexpr ze_result_t ZE_RESULT_ERROR_UNKNOWN = 0x7ffffffe;

inline constexpr uint32_t ZE_INIT_FLAG_GPU_ONLY = 1;

inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES = 0xc;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xd;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xe;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC = 0x16;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES = 0x17;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC = 0x18;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD = 0x1a;
inline constexpr ze_structure_type_t ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES = 0x10008;

inline constexpr int ZE_MEMORY_TYPE_UNKNOWN = 0;
inline constexpr int ZE_MEMORY_TYPE_HOST = 1;
inline constexpr int ZE_MEMORY_TYPE_DEVICE = 2;
inline constexpr int ZE_MEMORY_TYPE_SHARED = 3;

inline constexpr uint32_t ZE_EXTERNAL_MEMORY_TYPE_FLAG_OPAQUE_FD = 1u << 0;
inline constexpr uint32_t ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF = 1u << 1;

inline constexpr int ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS = 1;
inline constexpr int ZE_COMMAND_QUEUE_PRIORITY_NORMAL = 0;

struct ze_device_uuid_t {
  uint8_t id[16];
};

struct ze_device_properties_t {
  ze_structure_type_t stype;
  void* pNext;
  int type;
  uint32_t vendorId;
  uint32_t deviceId;
  uint32_t flags;
  uint32_t subdeviceId;
  uint32_t coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts;
  uint32_t maxCommandQueuePriority;
  uint32_t numThreadsPerEU;
  uint32_t physicalEUSimdWidth;
  uint32_t numEUsPerSubslice;
  uint32_t numSubslicesPerSlice;
  uint32_t numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits;
  uint32_t kernelTimestampValidBits;
  ze_device_uuid_t uuid;
  char name[256];
};
static_assert(offsetof(ze_device_properties_t, uuid) == 96, "must match ze_api.h");
static_assert(offsetof(ze_device_properties_t, name) == 112, "must match ze_api.h");
static_assert(sizeof(ze_device_properties_t) == 368, "must match ze_api.h");

struct ze_pci_address_ext_t {
  uint32_t domain;
  uint32_t bus;
  uint32_t device;
  uint32_t function;
};
struct ze_pci_speed_ext_t {
  int32_t genVersion;
  int32_t width;
  int64_t maxBandwidth;
};
struct ze_pci_ext_properties_t {
  ze_structure_type_t stype;
  void* pNext;
  ze_pci_address_ext_t address;
  ze_pci_speed_ext_t maxSpeed;
};
static_assert(sizeof(ze_pci_ext_properties_t) == 48, "must match ze_api.h");

struct ze_device_external_memory_properties_t {
  ze_structure_type_t stype;
  void* pNext;
  uint32_t memoryAllocationImportTypes;
  uint32_t memoryAllocationExportTypes;
  uint32_t imageImportTypes;
  uint32_t imageExportTypes;
};
static_assert(sizeof(ze_device_external_memory_properties_t) == 32, "must match ze_api.h");

struct ze_context_desc_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t flags;
};

struct ze_command_queue_desc_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t ordinal;  // command queue group; 0 is the compute group, which also copies
  uint32_t index;
  uint32_t flags;
  int mode;
  int priority;
};
static_assert(sizeof(ze_command_queue_desc_t) == 40, "must match ze_api.h");

struct ze_device_mem_alloc_desc_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t flags;
  uint32_t ordinal;
};
struct ze_host_mem_alloc_desc_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t flags;
};

struct ze_memory_allocation_properties_t {
  ze_structure_type_t stype;
  void* pNext;
  int type;
  uint64_t id;  // changes when an address is freed and allocated again
  uint64_t pageSize;
};
static_assert(offsetof(ze_memory_allocation_properties_t, id) == 24, "must match ze_api.h");
static_assert(sizeof(ze_memory_allocation_properties_t) == 40, "must match ze_api.h");

// Chained into a device allocation's descriptor: the allocation may be exported as these types.
struct ze_external_memory_export_desc_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t flags;
};
// Chained into zeMemGetAllocProperties: asks for an fd of the allocation.
struct ze_external_memory_export_fd_t {
  ze_structure_type_t stype;
  const void* pNext;
  uint32_t flags;
  int fd;
};
static_assert(offsetof(ze_external_memory_export_fd_t, fd) == 20, "must match ze_api.h");
static_assert(sizeof(ze_external_memory_export_fd_t) == 24, "must match ze_api.h");

// X(member, symbol to dlsym, required|optional, parameter list); every one returns ze_result_t.
#define HMR_ZE_SYMBOLS(X)                                                                         \
  X(zeInit, "zeInit", required, (uint32_t flags))                                                \
  X(zeDriverGet, "zeDriverGet", required, (uint32_t * count, ze_driver_handle_t * drivers))      \
  X(zeDriverGetApiVersion, "zeDriverGetApiVersion", required,                                    \
    (ze_driver_handle_t driver, uint32_t * version))                                             \
  X(zeDeviceGet, "zeDeviceGet", required,                                                        \
    (ze_driver_handle_t driver, uint32_t * count, ze_device_handle_t * devices))                 \
  X(zeDeviceGetProperties, "zeDeviceGetProperties", required,                                    \
    (ze_device_handle_t device, ze_device_properties_t * properties))                            \
  X(zeDeviceGetExternalMemoryProperties, "zeDeviceGetExternalMemoryProperties", required,        \
    (ze_device_handle_t device, ze_device_external_memory_properties_t * properties))            \
  X(zeContextCreate, "zeContextCreate", required,                                                \
    (ze_driver_handle_t driver, const ze_context_desc_t* desc, ze_context_handle_t* context))    \
  X(zeContextDestroy, "zeContextDestroy", required, (ze_context_handle_t context))               \
  X(zeMemGetAllocProperties, "zeMemGetAllocProperties", required,                                \
    (ze_context_handle_t context, const void* ptr,                                               \
     ze_memory_allocation_properties_t* properties, ze_device_handle_t* device))                 \
  X(zeMemGetAddressRange, "zeMemGetAddressRange", required,                                      \
    (ze_context_handle_t context, const void* ptr, void** base, size_t* size))                   \
  X(zeMemAllocDevice, "zeMemAllocDevice", required,                                              \
    (ze_context_handle_t context, const ze_device_mem_alloc_desc_t* desc, size_t size,           \
     size_t alignment, ze_device_handle_t device, void** ptr))                                   \
  X(zeMemAllocHost, "zeMemAllocHost", required,                                                  \
    (ze_context_handle_t context, const ze_host_mem_alloc_desc_t* desc, size_t size,             \
     size_t alignment, void** ptr))                                                              \
  X(zeMemAllocShared, "zeMemAllocShared", required,                                              \
    (ze_context_handle_t context, const ze_device_mem_alloc_desc_t* device_desc,                 \
     const ze_host_mem_alloc_desc_t* host_desc, size_t size, size_t alignment,                   \
     ze_device_handle_t device, void** ptr))                                                     \
  X(zeMemFree, "zeMemFree", required, (ze_context_handle_t context, void* ptr))                  \
  X(zeCommandListCreateImmediate, "zeCommandListCreateImmediate", required,                      \
    (ze_context_handle_t context, ze_device_handle_t device,                                     \
     const ze_command_queue_desc_t* desc, ze_command_list_handle_t* list))                       \
  X(zeCommandListAppendMemoryCopy, "zeCommandListAppendMemoryCopy", required,                    \
    (ze_command_list_handle_t list, void* dst, const void* src, size_t size,                     \
     ze_event_handle_t signal_event, uint32_t wait_count, ze_event_handle_t* wait_events))       \
  X(zeCommandListDestroy, "zeCommandListDestroy", required, (ze_command_list_handle_t list))     \
  /* Tiles of a device: in COMPOSITE hierarchy memory placed on one names the tile's handle,  \
     which zeDeviceGet does not list.  Core API; optional so a loader without it still works. */ \
  X(zeDeviceGetSubDevices, "zeDeviceGetSubDevices", optional,                                    \
    (ze_device_handle_t device, uint32_t * count, ze_device_handle_t * sub_devices))             \
  /* A device's PCI address (an extension every current driver has); without it, no sys_dev. */ \
  X(zeDevicePciGetPropertiesExt, "zeDevicePciGetPropertiesExt", optional,                        \
    (ze_device_handle_t device, ze_pci_ext_properties_t * properties))                           \
  /* API >= 1.6: waits for an immediate list.  A synchronous-mode list already returns from   \
     the append only when the copy is done; this makes it explicit where the loader has it. */ \
  X(zeCommandListHostSynchronize, "zeCommandListHostSynchronize", optional,                      \
    (ze_command_list_handle_t list, uint64_t timeout))

// The resolved entry points; null only for an optional symbol the loader lacks.
struct ZeSymbols {
#define HMR_ZE_DECLARE_MEMBER(member, symbol, need, params) ze_result_t(*member) params = nullptr;
  HMR_ZE_SYMBOLS(HMR_ZE_DECLARE_MEMBER)
#undef HMR_ZE_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> ze_symbol_specs();

// Fills `symbols` from a table loaded with ze_symbol_specs().
void bind_ze_symbols(const hmem::SymbolTable& table, ZeSymbols& symbols);

}  // namespace hmr::ze
