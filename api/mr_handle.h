// An hmr_mr is one of two objects: a MemoryRegion (the full path) or a CachedMr (a cache hit,
// core/cached_mr.h).  key, desc and close serve each directly; every other call runs on the
// MemoryRegion, or on a view of the CachedMr, so its rules exist once.
#pragma once

#include "api/api_guard.h"
#include "core/cached_mr.h"
#include "core/memory_region.h"

namespace hmr {

template <typename Op>
int with_memory_region(hmr_mr* handle, Op&& op) {
  if (core::MemoryRegion* region = core::from_handle<core::MemoryRegion>(handle)) {
    return op(*region);
  }
  if (const core::CachedMr* hit = core::from_handle<core::CachedMr>(handle)) {
    core::MemoryRegion view(*hit);
    return op(view);
  }
  return report_error(HMR_EINVAL, "not an MR handle");
}

}  // namespace hmr
