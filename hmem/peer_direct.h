// Peer-direct hints: whether a kernel peer-memory client lets the NIC register GPU virtual
// addresses directly (no dma-buf), read from sysfs the way the kernel publishes it:
//   /sys/kernel/mm/memory_peers/nv_mem/version     nv_peer_mem (MLNX_OFED), client nv_mem
//   /sys/kernel/mm/memory_peers/nv_mem_nc/version  nv_peer_mem, non-coherent client nv_mem_nc
//   /sys/module/nvidia_peermem/version             nvidia-peermem (the NVIDIA driver's module)
// These are hints: they say a client is loaded, not that a given GPU and NIC can reach each
// other, so the report carries what was found and why it matters.
#pragma once

#include <string>
#include <vector>

namespace hmr::hmem {

struct PeerMemoryClient {
  std::string name;     // "nvidia_peermem", "nv_mem", "nv_mem_nc"
  std::string path;     // the file it was read from
  std::string version;  // its contents, trimmed
};

struct PeerDirectReport {
  bool available = false;
  std::vector<PeerMemoryClient> clients;
  std::string reason;  // why peer-direct is or is not available
};

// Reads the hints under `root` ("" or "/" for the real sysfs; tests give a directory of their
// own that mirrors the layout).
PeerDirectReport probe_peer_direct(const std::string& root);

}  // namespace hmr::hmem
