// The dma-buf of Gaudi memory the application allocated, from HCCL: used only where hl-thunk
// cannot export it (hbm_pool_dmabuf.h) and the application says its HCCL has a communicator
// (HMR_SYNAPSEAI_HCCL_DMABUF=1), since before one HCL's lookup calls through a device HCCL has
// not made yet and the process dies (hccl_context.cpp hccl_lookup_dma_buff_ctx).
//
// hcclLookupDMABuff does not look at the address and size it is given: it returns the one
// dma-buf HCCL exported for gaudi-direct when it set up its scale-out provider, which covers the
// device's whole "global_hbm" pool from the pool's start (HabanaAI/HCL: hccl_wrapper.cpp
// hcclLookupDMABuff_Wrapper, hccl_context::hccl_lookup_dma_buff_ctx, ofi_component_t::
// getDmabufFd; scaleout_provider.cpp and hl_ofi_component.cpp initializeMemoryRegion).  So:
// - the fd is HCCL's (it closes it when it tears down): hmr holds a duplicate and never closes
//   or hands out HCCL's;
// - the offset of a range counts from the pool's start, which SynapseAI names as
//   synDeviceGetInfoV2(acquired device).globalHbmBaseAddress;
// - the dma-buf's size (lseek SEEK_END) bounds what lies in it: a range outside the pool (host
//   memory, another device) is refused here, since HCCL answers for any address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hmem/iface.h"
#include "synapseai/synapse_symbols.h"
#include "util/status.h"

namespace hmr::synapseai {

// [address, +length) as an offset into a duplicate of HCCL's gaudi-direct dma-buf.  `library`
// names libSynapse in reasons.  hcclLookupDMABuff must be resolved.
Result<hmem::DmabufExport> export_through_hccl(const SynapseSymbols& symbols,
                                               const std::string& library, uintptr_t address,
                                               size_t length);

}  // namespace hmr::synapseai
