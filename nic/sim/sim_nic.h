// The software NIC: registrations and RMA inside this process, with the semantics of an
// RDMA NIC (keys, bounds, access rights, enable state, endpoint binding, remote-event
// counters, stale translations under MMU_NOTIFY).  It is the reference every other adapter
// is compared with, and what the tests use to prove hmr's rules end to end.
//
// "DMA" is process_vm_readv/writev on this process, so an unmapped or read-only target page
// fails with EFAULT instead of crashing, as a NIC's access would fail.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "monitor/uffd_watcher.h"
#include "nic/nic.h"
#include "nic/sim/sim_options.h"
#include "nic/sim/sim_region_table.h"

namespace hmr::nic::sim {

class SimNic final : public Nic {
 public:
  static Result<std::unique_ptr<Nic>> open(const char* options);
  ~SimNic() override;

  const Capabilities& capabilities() const override { return capabilities_; }
  Result<Registration> register_memory(const RegistrationRequest& request) override;
  Status deregister(Registration& registration) override;
  Status refresh(Registration& registration, std::span<const iovec> segments) override;
  Status set_remote_access(Registration& registration, RemoteAccess access) override;
  Status check_local(void* desc, const void* buf, size_t len, uint64_t access) override;
  Status remote_access(const RmaRequest& request) override;

  // The memory operations (nic/sim/sim_memory_ops.cpp), each for real: RMA through a window's
  // or an indirect key's key reaches exactly what the key covers.
  Status rereg(Registration& registration, const ReregRequest& request) override;
  Result<MemoryWindow> alloc_window(WindowType type) override;
  Status bind_window(MemoryWindow& window, const WindowBind& bind) override;
  Status invalidate_window(MemoryWindow& window, void* queue, uint64_t work_request_id,
                           bool signaled) override;
  Status dealloc_window(MemoryWindow& window) override;
  Status advise(const Registration& registration, Advice advice, std::span<const iovec> ranges,
                bool flush) override;
  Result<Registration> register_indirect(std::span<const IndirectSegment> segments,
                                         uint64_t access) override;

 private:
  explicit SimNic(const SimOptions& options);
  Result<std::unique_ptr<SimRegion>> build_region(const RegistrationRequest& request);
  Result<std::unique_ptr<SimRegion>> build_device_region(const RegistrationRequest& request);
  Status watch_segments(const std::vector<iovec>& segments);
  Status choose_key(const RegistrationRequest& request, SimRegion& region);
  // A key no region uses, of the NIC's key size (caller holds table_mutex_ exclusively).
  Result<KeyBytes> fresh_key();
  // Charges `bytes` of pinned memory in place of `released` (a re-registration's old pages),
  // or refuses with HMR_ENOMEM past max_pinned; table_mutex_ held.
  Status pin(uint64_t bytes, uint64_t released);
  // The host bytes behind [addr, addr + len) of a registration's local addresses, as pieces
  // of its segments, and the offset of addr from the registration's first byte.
  static Status slice(const SimRegion& region, uint64_t addr, uint64_t len,
                      std::vector<iovec>& pieces, uint64_t& offset);
  void describe_operations();
  void mark_stale(uintptr_t start, uintptr_t end);
  // Whether [offset, offset+len) of the region's bytes lies in one of its segments.
  static bool within_one_segment(const SimRegion& region, uint64_t offset, uint64_t len);
  // Whether a peer may reach `region` now: enabled, its endpoint, a fresh translation.
  static Status check_reachable(const SimRegion& region, const RmaRequest& request);

  SimOptions options_;
  Capabilities capabilities_;
  uint64_t raw_key_tag_;  // upper half of RAW keys: a key of another sim NIC never matches

  mutable std::shared_mutex table_mutex_;  // shared: RMA; exclusive: (de)registration
  SimRegionTable table_;
  uint64_t pinned_bytes_ = 0;  // of the regions in table_ (pins=1); guarded by table_mutex_
  uint64_t next_key_ = 1;  // guarded by table_mutex_
  std::mutex atomics_mutex_;  // serialises fetch_add read-modify-write

  // MMU_NOTIFY model: a userfaultfd watcher over tracked regions, started by the first one.
  // An access waits while `tracker_pending_` is up (see UffdWatcher).
  std::atomic<uint32_t> tracker_pending_{0};
  std::mutex tracker_mutex_;
  std::unique_ptr<core::UffdWatcher> tracker_;
};

}  // namespace hmr::nic::sim
