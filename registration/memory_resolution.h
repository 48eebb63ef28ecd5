// Resolving what a registration's memory is, before any lock or NIC call: detected by the
// hmem registry, or — when the caller declared it (a device iface, or any iface in an
// HMR_MR_HMEM domain) — verified against what the runtime says.  Contradictions are errors
// with the reason, never a guess.
#pragma once

#include "hmem/hmem_registry.h"
#include "registration/mr_request.h"
#include "util/status.h"

namespace hmr::core {

// Fills request.memory, and request.iface/device from it.  `declared` is true in HMR_MR_HMEM
// domains: iface/device (SYSTEM included) are then the caller's statement, checked, not
// replaced.  A caller's own dma-buf (HMR_MR_DMABUF) is not a pointer: it is taken as declared.
Status resolve_memory(MrRequest& request, bool declared, hmem::Registry& registry);

// The public names of memory kinds (enum hmr_mem_kind) and back; an out-of-range value is
// an error naming it.
hmr_mem_kind public_kind(hmem::MemoryKind kind);
Result<hmem::MemoryKind> internal_kind(int kind);

}  // namespace hmr::core
