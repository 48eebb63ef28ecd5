// HMR_* access bits as IBV_ACCESS_* flags.  Verbs wants LOCAL_WRITE whenever the NIC writes the
// memory (receives, read responses) and also whenever peers may write or do atomics: the kernel
// refuses REMOTE_WRITE or REMOTE_ATOMIC without it.
#pragma once

#include <cstdint>

namespace hmr::verbs {

struct AccessExtras {
  bool atomics = false;           // the device has atomics: REMOTE_READ|REMOTE_WRITE add them
  bool on_demand_paging = false;  // IBV_ACCESS_ON_DEMAND
  bool relaxed_ordering = false;  // IBV_ACCESS_RELAXED_ORDERING (optional bit)
  bool iwarp = false;             // an iWARP device: an RDMA Read sink needs REMOTE_WRITE
};

unsigned int ibv_access_for(uint64_t hmr_access, const AccessExtras& extras);

// The access of a memory window (only remote bits mean anything there).
unsigned int ibv_window_access_for(uint64_t hmr_access);

}  // namespace hmr::verbs
