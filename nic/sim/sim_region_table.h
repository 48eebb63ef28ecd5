// The software NIC's translation table: one SimRegion per registration, found by key
// (remote side) or by descriptor (local side).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nic/key_bytes.h"
#include "nic/nic.h"

namespace hmr::nic::sim {

// A dma-buf mapped into this process so the software NIC can reach its bytes.
class DmabufMapping {
 public:
  DmabufMapping(void* address, size_t length) : address_(address), length_(length) {}
  DmabufMapping(const DmabufMapping&) = delete;
  DmabufMapping& operator=(const DmabufMapping&) = delete;
  ~DmabufMapping();
  void* address() const { return address_; }

 private:
  void* address_;
  size_t length_;
};

// What a key in the table names: a registration, a bound memory window onto part of one, or
// an indirect key over parts of several.
enum class SimRegionKind { registration, window, indirect };

struct SimRegion {
  SimRegionKind kind = SimRegionKind::registration;
  KeyBytes key;
  uint64_t base_addr = 0;      // what a peer addresses byte 0 as
  uint64_t length = 0;
  uint64_t pinned_bytes = 0;   // host bytes it pins, when the modelled NIC pins (pins=1)
  uint64_t access = 0;
  std::vector<iovec> segments; // where the bytes live in this process, in order
  std::vector<iovec> local_ranges;  // addresses the owner passes as local buffers
  std::unique_ptr<DmabufMapping> dmabuf;
  RemoteAccess remote;
  bool track_page_changes = false;
  std::atomic<bool> stale{false};
  bool virt_addr = true;         // peers address byte 0 by its VA (else 0)
  bool requested_key = false;    // the application chose the key: re-registration keeps it
  // On-demand paging: the "DMA" follows the page tables at each access, so nothing goes stale
  // and pages need not exist until then.
  bool on_demand_paging = false;
  // A window's MR, or each MR an indirect key lies in: RMA through the key must also find
  // each of them reachable (enabled, bound to the endpoint, not stale), and counts on theirs.
  std::vector<const SimRegion*> parents;
  // Device memory the sim NIC was handed but cannot move (it has no DMA engine into a device):
  // what it was given, e.g. "cuda device 0 memory as dma-buf (fd 7, offset 4096, len 100)".
  // Empty for memory it reaches.  RMA to or from it is refused with this description.
  std::string device_memory;
  // The dma-buf of such a registration, as handed over (fd -1 for a peer-direct VA).
  hmr_mr_dmabuf device_dmabuf{-1, 0, 0, nullptr};
};

// Not synchronised: SimNic guards it with its table lock.
class SimRegionTable {
 public:
  bool key_in_use(uint64_t low_key) const { return by_key_.count(low_key) != 0; }
  SimRegion* insert(std::unique_ptr<SimRegion> region);
  std::unique_ptr<SimRegion> erase(SimRegion* region);
  // Files the region under `key` instead of its current one (the region keeps its address).
  void rekey(SimRegion* region, const KeyBytes& key);
  SimRegion* find_by_key(const KeyBytes& key) const;
  SimRegion* find_by_desc(void* desc) const;
  void for_each_overlapping(uintptr_t start, uintptr_t end,
                            const std::function<void(SimRegion&)>& visit) const;

 private:
  std::unordered_map<uint64_t, std::unique_ptr<SimRegion>> by_key_;
  std::unordered_set<const void*> descriptors_;  // live regions, to vet a caller's desc
};

}  // namespace hmr::nic::sim
