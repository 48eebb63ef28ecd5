// Where the buffer a Level Zero dma-buf export covers starts.
//
// The Intel driver (intel/compute-runtime, since 25.27) serves small device allocations of a
// one-device driver from a USM pool.  zeMemGetAddressRange then answers the sub-allocation
// (ContextImp::getMemAddressRange), but the export is the pool's whole buffer
// (ContextImp::handleAllocationExtensions exports the allocation data's graphics allocation),
// so an offset taken from the sub-allocation's base points the NIC at other bytes.  No call
// names the pool; what does is zeMemGetAllocProperties, which answers from the allocation data
// holding the address: for every byte of a pool, allocated or free, the pool's type and id.  So
// the buffer starts at the lowest page whose id is the sub-allocation's.
#pragma once

#include <cstdint>

#include "util/status.h"
#include "ze/ze_symbols.h"

namespace hmr::ze {

// The start of the exported buffer that holds the allocation [base, ...) of allocation id
// `id`: `base` itself unless the byte before it has the same id (a pool), then the lowest
// page-aligned address of that run of ids, found with O(log(pool size / page)) queries.
// Fails closed when the driver cannot answer.
Result<uintptr_t> exported_buffer_start(const ZeSymbols& symbols, ze_context_handle_t context,
                                        uintptr_t base, uint64_t id, size_t page);

}  // namespace hmr::ze
