// Pre-faulting a large host range before the NIC pins it.  Pinning (get_user_pages) faults
// untouched pages in one at a time under the mm lock; populating the range first, in
// parallel chunks on the registration pool, turns that into a few large, concurrent calls.
// Only ever host memory the CPU may touch: never device memory, never DEVICE_ONLY, never a
// dma-buf, never for an ODP NIC (whose point is not to fault everything in), and only for a
// NIC that pins (a software NIC copies, and populating a sparse range for it only spent
// memory).  Pages are populated as the pin faults them: for writing only when the NIC may
// write them (ib_umem_get pins with FOLL_WRITE only for a writable access), so a read-only
// registration of a private file mapping makes no copies and one of a shared file mapping
// dirties nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nic/nic.h"
#include "util/thread_pool.h"

namespace hmr::core {

// How pages are populated.  `automatic`: madvise(MADV_POPULATE_WRITE or _READ), falling back
// to touching when the kernel lacks it (Linux < 5.14).  `touch`: always the fallback (tests).
enum class PrefaultMethod { automatic, touch };

struct PrefaultSettings {
  uint64_t min_bytes = 64ULL << 20;  // HMR_REG_PREFAULT_MIN: smaller ranges are left alone
  size_t threads = 1;                // HMR_REG_THREADS, the caller included
};

struct PrefaultOutcome {
  uint64_t populated_bytes = 0;  // now backed by pages (written or read-populated)
  uint64_t skipped_bytes = 0;    // left alone: not populatable (I/O mapping, unmapped, no access)
};

// The one decision: whether `request` (on a NIC that pins host memory or not, with on-demand
// paging or not) is pre-faulted.
bool wants_prefault(const nic::RegistrationRequest& request, uint64_t min_bytes,
                    bool pins_host_memory, bool on_demand_paging);

// Whether a registration with `access` lets the NIC write the memory (what verbs calls
// IBV_ACCESS_LOCAL_WRITE: the target of a Read or a receive, or of remote writes).
bool nic_may_write(uint64_t access);

// Populates the pages covering [addr, addr+len) on `pool`, for writing when `for_write` (and
// the mapping allows it).  Never fails a registration and never crashes on a range it may not
// write: such parts are read-populated or skipped, and the NIC's own registration then
// reports whatever is wrong with the range.
PrefaultOutcome prefault_range(void* addr, size_t len, ThreadPool& pool, bool for_write = true,
                               PrefaultMethod method = PrefaultMethod::automatic);

// Pre-faults every segment of `request` when wants_prefault() says so.
void prefault_for_registration(const nic::RegistrationRequest& request,
                               const PrefaultSettings& settings, bool pins_host_memory,
                               bool on_demand_paging);

}  // namespace hmr::core
