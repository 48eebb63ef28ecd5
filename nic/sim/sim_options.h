// Options of the software NIC: which provider behaviour it models.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"

namespace hmr::nic::sim {

struct SimOptions {
  uint64_t required_mr_mode = 0;   // modelled provider requirements (require=RAW|PROV_KEY...)
  size_t key_size = 8;             // 1..8, or 16 for RAW keys
  size_t iov_limit = 4;
  size_t mr_cnt = 65536;
  uint64_t max_mr_size = 1ULL << 40;
  // Which device-memory paths the modelled NIC claims (dmabuf=0|1, peer_direct=0|1).  dma-buf
  // import is on by default (the sim NIC maps a host dma-buf to reach its bytes); peer-direct
  // (registering a device VA, as with nvidia-peermem) is off unless asked for.
  bool dmabuf_import = true;
  bool peer_direct = false;
  // Whether the modelled NIC pins host memory it registers (pins=0|1), and the most bytes it
  // holds pinned (max_pinned=<bytes>, implies pins=1; 0: no bound of its own): registrations
  // past it are refused with HMR_ENOMEM, as a kernel driver past RLIMIT_MEMLOCK refuses.
  bool pins = false;
  uint64_t max_pinned_bytes = 0;
};

// Parses "require=RAW|VIRT_ADDR;key_size=16;iov_limit=4;mr_cnt=100;max_mr_size=4096;
// dmabuf=0;peer_direct=1;pins=1;max_pinned=65536".
// RAW implies PROV_KEY (a raw key is always chosen by the NIC) and a 16-byte key.
Result<SimOptions> parse_sim_options(const char* text);

}  // namespace hmr::nic::sim
