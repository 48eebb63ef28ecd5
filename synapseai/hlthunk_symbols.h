// hl-thunk (libhl-thunk.so), the thin user-space layer over the habanalabs driver, as hmr uses
// it for device memory of its own: declared in hmr's own minimal types, prototypes and values
// as in hl-thunk-open's hlthunk.h.  Calls return a negative value (or 0 for handles and
// addresses) on failure, with errno telling why.
#pragma once

#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"

namespace hmr::synapseai {

inline constexpr int HLTHUNK_DEVICE_DONT_CARE = 4;  // enum hlthunk_device_name

// X(member, symbol to dlsym, required|optional, return type, parameter list)
#define HMR_HLTHUNK_SYMBOLS(X)                                                                  \
  X(hlthunk_open, "hlthunk_open", required, int, (int device_name, const char* busid))         \
  X(hlthunk_close, "hlthunk_close", required, int, (int fd))                                   \
  /* The device whose module id HLS_MODULE_ID names (hlthunk_device.h); -1 when none has it. */ \
  X(hlthunk_open_by_module_id, "hlthunk_open_by_module_id", optional, int,                     \
    (uint32_t module_id))                                                                       \
  X(hlthunk_device_memory_alloc, "hlthunk_device_memory_alloc", required, uint64_t,            \
    (int fd, uint64_t size, uint64_t page_size, bool contiguous, bool shared))                 \
  X(hlthunk_device_memory_free, "hlthunk_device_memory_free", required, int,                   \
    (int fd, uint64_t handle))                                                                  \
  X(hlthunk_device_memory_map, "hlthunk_device_memory_map", required, uint64_t,                \
    (int fd, uint64_t handle, uint64_t hint_addr))                                              \
  X(hlthunk_memory_unmap, "hlthunk_memory_unmap", required, int,                               \
    (int fd, uint64_t device_virt_addr))                                                        \
  /* Gaudi2 and newer: dma-buf of a range of mapped device memory. */                           \
  X(hlthunk_device_mapped_memory_export_dmabuf_fd,                                              \
    "hlthunk_device_mapped_memory_export_dmabuf_fd", optional, int,                             \
    (int fd, uint64_t addr, uint64_t size, uint64_t offset, uint32_t flags))                    \
  X(hlthunk_get_pci_bus_id_from_fd, "hlthunk_get_pci_bus_id_from_fd", optional, int,           \
    (int fd, char* pci_bus_id, int len))

// The resolved entry points; null only for an optional symbol the library lacks.
struct HlthunkSymbols {
#define HMR_HLTHUNK_DECLARE_MEMBER(member, symbol, need, ret, params) ret(*member) params = nullptr;
  HMR_HLTHUNK_SYMBOLS(HMR_HLTHUNK_DECLARE_MEMBER)
#undef HMR_HLTHUNK_DECLARE_MEMBER
};

std::span<const hmem::SymbolSpec> hlthunk_symbol_specs();
void bind_hlthunk_symbols(const hmem::SymbolTable& table, HlthunkSymbols& symbols);

}  // namespace hmr::synapseai
