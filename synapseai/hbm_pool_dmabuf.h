// The dma-buf of Gaudi memory the application allocated through SynapseAI, exported by
// hl-thunk from the device mapping that holds the acquired device's "global_hbm" pool: the way
// libfabric's fabtests (hmem_synapseai.c ft_synapseai_get_dmabuf_fd) and UCX's Gaudi transport
// export such memory.
//
// SynapseAI keeps the device's memory in pools that SCAL manages; synDeviceMalloc hands out
// pieces of "global_hbm", which lies inside one device mapping.  The driver names a mapping only
// by its exact start (habanalabs memory.c export_dmabuf_from_addr: an interior address is
// EINVAL) and takes the range as a page-aligned offset into it (validate_export_params).  So:
// - the device fd is the one SynapseAI opened (synDeviceGetInfoV2(acquired device).fd);
// - the mapping start is the pool's device_base_allocated_address (scal_pool_get_infoV2), which
//   may lie below the pool's own start, device_base_address;
// - the range's pages are exported, and the NIC is given the range's offset in its first page.
//
// Unlike HCCL's hcclLookupDMABuff (hccl_dmabuf.h), nothing here reaches into HCCL, which
// dereferences a device it has not made until a communicator exists: this works in any
// process that acquired its device, HCCL or not.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hmem/iface.h"
#include "synapseai/hlthunk_symbols.h"
#include "synapseai/scal_symbols.h"
#include "synapseai/synapse_symbols.h"
#include "util/status.h"

namespace hmr::synapseai {

// What the export needs from the three libraries, with their paths for reasons.  Every pointer
// named here must be resolved: synDeviceGetInfoV2, the mapped-memory export and all of SCAL.
struct HbmPoolExporter {
  const SynapseSymbols* synapse = nullptr;
  const HlthunkSymbols* hlthunk = nullptr;
  const ScalSymbols* scal = nullptr;
};

// [address, +length) of the acquired device's "global_hbm" pool as a new dma-buf of its pages;
// HMR_EINVAL for a range not inside the pool (host memory, another device's memory).
Result<hmem::DmabufExport> export_from_hbm_pool(const HbmPoolExporter& libraries,
                                                uintptr_t address, size_t length);

}  // namespace hmr::synapseai
