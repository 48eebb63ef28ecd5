#include "nic/sim/sim_region_table.h"

#include <sys/mman.h>

namespace hmr::nic::sim {

DmabufMapping::~DmabufMapping() { munmap(address_, length_); }

SimRegion* SimRegionTable::insert(std::unique_ptr<SimRegion> region) {
  SimRegion* raw = region.get();
  // Both or neither: a throw (out of memory) between the two left a descriptor naming a
  // region the failed emplace had freed.
  const uint64_t key = region->key.low_u64();
  auto [slot, inserted] = by_key_.try_emplace(key);
  try {
    descriptors_.insert(raw);
  } catch (...) {
    if (inserted) by_key_.erase(slot);
    throw;
  }
  if (inserted) slot->second = std::move(region);
  return raw;
}

std::unique_ptr<SimRegion> SimRegionTable::erase(SimRegion* region) {
  auto it = by_key_.find(region->key.low_u64());
  if (it == by_key_.end() || it->second.get() != region) return nullptr;
  std::unique_ptr<SimRegion> owned = std::move(it->second);
  by_key_.erase(it);
  descriptors_.erase(region);
  return owned;
}

void SimRegionTable::rekey(SimRegion* region, const KeyBytes& key) {
  std::unique_ptr<SimRegion> owned = erase(region);
  owned->key = key;
  insert(std::move(owned));
}

SimRegion* SimRegionTable::find_by_key(const KeyBytes& key) const {
  auto it = by_key_.find(key.low_u64());
  if (it == by_key_.end()) return nullptr;
  // Keys of up to 64 bits match on their value; wider (RAW) keys must match every byte.
  const KeyBytes& registered = it->second->key;
  if ((registered.size > 8 || key.size > 8) && !(registered == key)) return nullptr;
  return it->second.get();
}

SimRegion* SimRegionTable::find_by_desc(void* desc) const {
  // A descriptor is the region's address; look it up rather than trust it, so a stale or
  // forged descriptor is an error instead of a wild pointer.
  if (descriptors_.count(desc) == 0) return nullptr;
  return static_cast<SimRegion*>(desc);
}

void SimRegionTable::for_each_overlapping(uintptr_t start, uintptr_t end,
                                          const std::function<void(SimRegion&)>& visit) const {
  for (const auto& [key, region] : by_key_) {
    for (const iovec& segment : region->segments) {
      const auto first = reinterpret_cast<uintptr_t>(segment.iov_base);
      if (first < end && start < first + segment.iov_len) {
        visit(*region);
        break;
      }
    }
  }
}

}  // namespace hmr::nic::sim
