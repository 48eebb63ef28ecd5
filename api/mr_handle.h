// An hmr_mr is one of two objects: a MemoryRegion (the full path) or a CachedMr (a cache hit,
// core/cached_mr.h).  key, desc and close serve each directly; every other call runs on the
// MemoryRegion, or on a view of the CachedMr, so its rules exist once.  A hit that an
// operation changes or holds becomes a MemoryRegion of its own (Domain::promote), which every
// later call then reaches.
#pragma once

#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "core/cached_mr.h"
#include "core/domain.h"
#include "core/memory_region.h"

namespace hmr {

template <typename Op>
int with_memory_region(hmr_mr* handle, Op&& op) {
  if (core::MemoryRegion* region = core::from_handle<core::MemoryRegion>(handle)) {
    return op(*region);
  }
  if (const core::CachedMr* hit = core::from_handle<core::CachedMr>(handle)) {
    if (core::MemoryRegion* promoted = hit->promoted()) return op(*promoted);
    core::MemoryRegion view(*hit);
    return op(view);
  }
  return report_bad_handle(handle, "not an MR handle");
}

// The MemoryRegion behind a handle for an operation that changes the MR or holds on to it
// (rereg, windows, indirect keys): a hit is promoted to one of its own first.  Null when the
// handle is not an MR.
inline core::MemoryRegion* owned_memory_region(hmr_mr* handle) {
  if (core::MemoryRegion* region = core::from_handle<core::MemoryRegion>(handle)) return region;
  if (core::CachedMr* hit = core::from_handle<core::CachedMr>(handle)) {
    return &hit->domain().promote(*hit);
  }
  return nullptr;
}

}  // namespace hmr
