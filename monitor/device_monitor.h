// DeviceMonitor — the monitor of every domain's device-memory cache, and the path of explicit
// invalidation (hmr_mem_invalidate, hmr_mem_free) into every cache.
//
// Device runtimes report frees in three ways (hmem::Iface::FreeTracking):
//   alloc_id       (CUDA buffer ids, Level Zero allocation ids) cache keys carry the id, so a
//                  new allocation at an old address never hits an old entry; observe() also
//                  notices the new id and drops the old allocation's entries at once, so their
//                  NIC registrations and dma-bufs do not linger until evicted;
//   free_events    (ROCr deallocation callbacks) the iface calls back on free; the callback
//                  invalidates here;
//   explicit_only  (Neuron, SynapseAI) nothing: the application calls hmr_mem_invalidate
//                  (or frees through hmr_mem_free) before it frees.
// Nothing is subscribed per range: device memory is never watched through the CPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <shared_mutex>

#include "hmem/iface.h"
#include "monitor/monitor.h"

namespace hmr::core {

class DeviceMonitor final : public Monitor {
 public:
  static DeviceMonitor& instance();

  const char* name() const override { return "device"; }
  Status start() override { return ok_status(); }
  void stop() override {}
  Status subscribe(uintptr_t start, size_t len) override;
  void unsubscribe(uintptr_t start, size_t len) override;

  // Called for each device allocation a registration resolved to.
  // Drops cached registrations of an older allocation that overlapped it, and arranges free
  // notifications for runtimes that deliver them.  Cheap when the allocation is known.
  void observe(hmem::Iface& iface, const hmem::PointerInfo& memory);
  // Drops [start, end) from every cache that listens here and forgets its allocations.
  void invalidate_everywhere(uintptr_t start, uintptr_t end);

  // Whether the runtime reports the free of the allocation holding [start, start + len) to us
  // (its callback is registered: free_events), so that no cached registration of it outlives
  // it.  Takes the lock: for the device hit path's hints, asked once per hint, not per hit.
  bool frees_reported(uintptr_t start, size_t len);
  // Moves on with every free reported and every invalidation made here.  A device hit path hint
  // taken under one value (core/recent_device_ranges.h) is trusted without asking the runtime
  // only while it still holds.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Its lock, held across fork() (util/fork_held_lock.h).
  static std::shared_mutex& fork_lock() { return instance().mutex_; }

 private:
  // What a runtime called the memory a registration resolved to: one allocation, or for CUDA
  // VMM memory the segments that hold the registered range.  Several views of one reservation
  // overlap while all of them are alive (PyTorch's expandable segments: a buffer inside
  // segment 0 and one across segments 0 and 1 share a base), so a view is recorded by its
  // base and length, and an overlapping one is only taken as freed when the runtime no longer
  // names it as recorded (observe()).
  using View = std::pair<uint64_t, uint64_t>;  // (base, length)
  struct Known {
    uint64_t alloc_id = 0;
    int iface = 0;
    bool watched = false;  // its runtime calls on_free when it is freed
  };
  using Views = std::map<View, Known>;
  static void on_free(void* context, uint64_t base, size_t alloc_len);
  void forget(uintptr_t start, uintptr_t end);
  // With mutex_ held.  The first view in address order that may overlap [start, ...): no view
  // is longer than the longest recorded, so none starting that far before `start` reaches it.
  Views::iterator first_overlapping(uint64_t start);
  // With mutex_ held exclusively: records a view, or erases one (returning the next).
  void record(const View& view, const Known& known);
  Views::iterator erase(Views::iterator view);

  std::shared_mutex mutex_;  // never held while notifying or calling a runtime
  Views known_;              // every view seen and not known to be freed
  std::map<uint64_t, size_t> lengths_;  // how many views of each length: the longest bounds
                                        // the walk for overlaps
  std::atomic<uint64_t> generation_{0};
};

}  // namespace hmr::core
