// UCX's rcache set up the way hmr's benches compare against it: in front of a no-op
// registration (mem_reg stores a counter in the region as its key), with its munmap events on
// (UCM_EVENT_VM_UNMAPPED at the priority UCX's IB memory domain uses), no PFN check and no
// limits, so what is measured is the cache.  Only UCX's types and constants are used here:
// each bench creates the cache with its own ucs_rcache_create (linked, or looked up with dlsym).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>

// UCX's devel headers have no extern "C" of their own.
extern "C" {
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
}

namespace hmr_bench {

struct UcxRegion {
  ucs_rcache_region_t super;
  uint64_t key;  // what the no-op registration stores
};

// `registrations` counts the no-op registrations; it must outlive the cache.
inline ucs_rcache_params_t noop_rcache_params(std::atomic<uint64_t>* registrations,
                                              size_t alignment) {
  struct Ops {
    static ucs_status_t mem_reg(void* context, ucs_rcache_t*, void*, ucs_rcache_region_t* region,
                                uint16_t) {
      auto* counter = static_cast<std::atomic<uint64_t>*>(context);
      reinterpret_cast<UcxRegion*>(region)->key =
          counter->fetch_add(1, std::memory_order_relaxed) + 1;
      return UCS_OK;
    }
    static void mem_dereg(void*, ucs_rcache_t*, ucs_rcache_region_t*) {}
    static void dump_region(void*, ucs_rcache_t*, ucs_rcache_region_t*, char* buffer, size_t max) {
      if (max != 0) buffer[0] = '\0';
    }
  };
  static const ucs_rcache_ops_t ops = {Ops::mem_reg, Ops::mem_dereg, Ops::dump_region};
  ucs_rcache_params_t params;
  std::memset(&params, 0, sizeof params);
  params.region_struct_size = sizeof(UcxRegion);
  params.alignment = alignment;
  params.max_alignment = alignment;
  params.ucm_events = UCM_EVENT_VM_UNMAPPED;
  params.ucm_event_priority = 1000;  // what UCX's IB memory domain uses
  params.ops = &ops;
  params.context = registrations;
  params.flags = UCS_RCACHE_FLAG_NO_PFN_CHECK;
  params.max_regions = ULONG_MAX;
  params.max_size = SIZE_MAX;
  params.max_unreleased = SIZE_MAX;
  return params;
}

}  // namespace hmr_bench
