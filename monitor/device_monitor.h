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

  // Called for each device allocation a registration resolved to: records it and drops
  // cached registrations of an older allocation that overlapped it.  Cheap when it is known.
  void observe(hmem::Iface& iface, const hmem::PointerInfo& memory);
  // Then, for runtimes that deliver free notifications (free_events), arranges one for it.
  // False when the memory's free would go unheard: it is identified by nothing else
  // (alloc_id 0) and the watch could not be set (refused, or the memory freed meanwhile).
  // Such memory must not be cached: a free and an allocation at the same address would look
  // the same.  (Two steps, so that a caller can note what its cache had seen between them:
  // observe()'s own drops are no reason to keep a registration out of the cache, a free
  // reported once the watch is set is.)
  [[nodiscard]] bool watch(hmem::Iface& iface, const hmem::PointerInfo& memory);
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
  // Moves the generation on without dropping anything: memory was reported freed to one
  // domain only (hmr_mem_invalidate with a domain), and no hint taken before is trusted.
  void distrust_hints() { generation_.fetch_add(1, std::memory_order_acq_rel); }
  // Its lock, held across fork() (util/fork_held_lock.h).
  static std::shared_mutex& fork_lock() { return instance().mutex_; }

 private:
  struct Known {
    uint64_t length = 0;
    uint64_t alloc_id = 0;
    int iface = 0;
    bool watched = false;  // its runtime calls on_free when it is freed
  };
  static void on_free(void* context, uint64_t base, size_t alloc_len);
  static bool recorded(const Known& known, const hmem::PointerInfo::Piece& piece, int iface);
  void forget(uintptr_t start, uintptr_t end);

  std::shared_mutex mutex_;  // never held while notifying or calling a runtime
  std::map<uint64_t, Known> known_;  // allocation pieces seen (PointerInfo::pieces), by base
  std::atomic<uint64_t> generation_{0};
};

}  // namespace hmr::core
