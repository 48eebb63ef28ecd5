// Domain: one NIC, the mr_mode negotiated with the application, and everything registered
// through it.  It validates every request before any lock or NIC call, and owns the
// asynchronous registration worker when an event queue is bound with HMR_REG_MR.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "cache/registration_cache.h"
#include "core/domain_stats.h"
#include "core/key_registry.h"
#include "core/recent_device_ranges.h"
#include "nic/nic.h"
#include "registration/device_registration.h"
#include "registration/export_policy.h"
#include "registration/mr_request.h"
#include "registration/nic_registrar.h"
#include "registration/pinned_limit.h"
#include "registration/registration_cost.h"
#include "util/credit_pool.h"
#include "util/environment.h"
#include "util/object.h"
#include "util/sharded_counters.h"
#include "util/status.h"

namespace hmr::core {

class AsyncRegistrar;
class CachedMr;
class EventQueue;
class MemoryRegion;

// What a caller of hmr_mr_regattr declared about a range, for Domain::try_device_hit: the iface
// and device, which the runtime must confirm (SYSTEM: nothing declared, the memory is
// identified), and HMR_MR_REPORTED_BASE.
struct DeviceDeclaration {
  int iface = HMR_HMEM_SYSTEM;
  uint64_t device = 0;
  bool reported_base = false;
};

// What an MR's close returns when the NIC failed to deregister: the MR is closed all the same,
// so the failure is never -HMR_EBUSY, which from a close means nothing was closed (hmr.h).
Status closed_anyway(Status failure);

class Domain : public Tagged<ObjectClass::domain> {
 public:
  // `attr` is the caller's request, already read; on success `negotiated` holds the result.
  static Result<std::unique_ptr<Domain>> open(const hmr_domain_attr& attr,
                                              hmr_domain_attr* negotiated);
  ~Domain();

  // HMR_EBUSY while objects of the domain are open; otherwise stops the async worker.
  Status prepare_close();
  // After prepare_close(), before the domain is destroyed: the caches give back what they
  // hold and the NIC closes what it opened itself; an error says what it had to leave open
  // (Nic::close_native), and the domain is destroyed all the same.
  Status close_nic();
  Status bind_event_queue(EventQueue& queue, uint64_t flags);

  // What a registration hands out: a MemoryRegion, or, for plain host memory that the cache
  // shares, the same pooled CachedMr a hit gets (core/hit_path.cpp), so that the first
  // registration of a range is closed as cheaply as its hits.  Exactly one is set.
  struct Registered {
    MemoryRegion* region = nullptr;
    CachedMr* shared = nullptr;
    bool written = false;  // the handle is in the caller's `out` already (asynchronous MRs)
  };
  // `probed`: what try_cached_hit() learnt of this same request, so a miss it already looked
  // up is not looked up again (RegistrationCache::Probe).  `out`: the application's MR
  // handle, which an asynchronous registration writes before it is submitted, since its
  // completion may be read at once, by a thread that then uses *out (docs/semantics.md);
  // nothing of the call may touch *out after the submission (that thread may have closed the
  // MR and reused the memory).
  Result<Registered> register_memory(const hmr_mr_attr& attr, uint64_t flags,
                                     RegistrationCache::Probe probed, hmr_mr** out);
  Status close_memory_region(MemoryRegion* region);

  // The cache hit path (core/hit_path.cpp): hmr_mr_reg of host memory that the cache holds,
  // as a pooled CachedMr; nullptr when the request needs the full path (register_memory),
  // which then also reports any error.  No lock, allocation or virtual call on the way.
  // `probed` tells the full path whether the cache was already looked up and held nothing.
  // The caller has checked flags and offset (both 0): six arguments stay in registers.
  CachedMr* try_cached_hit(const void* buf, size_t len, uint64_t access, void* context,
                           RegistrationCache::Probe& probed);
  // The same for device memory the device cache holds: one question to the runtime (the
  // allocation's identity: hmem::Iface::identify) and a lock-free lookup per export path;
  // nullptr for anything else, which the full path then takes (core/hit_path.cpp).
  // `declared`: what the caller declared (hmr_mr_regattr), which the runtime must confirm.
  CachedMr* try_device_hit(const void* buf, size_t len, uint64_t access, void* context,
                           const DeviceDeclaration& declared = {});
  void close_cached(CachedMr* mr);
  // A hit handle that an operation needs as a MemoryRegion of its own (rereg, indirect keys):
  // made once, then every call on the handle reaches it (core/cached_mr.h).
  MemoryRegion& promote(CachedMr& hit);
  // hmr_mr_close of a promoted hit: the MemoryRegion's rules (HMR_EBUSY while used), then the
  // hit's own accounting.
  Status close_promoted(CachedMr* hit);

  // Whether this domain can do `op` (hmr_md_query_op): the NIC's answer, narrowed by the
  // domain's own rules (implicit ODP needs VA addressing, windows 64-bit keys).
  nic::Support operation_support(hmr_md_op op) const;

  // hmr_mr_reg_indirect (core/indirect_key.cpp): one key over pieces of MRs of this domain.
  struct IndirectPiece {
    MemoryRegion* mr;
    uintptr_t addr;
    size_t len;
  };
  Result<MemoryRegion*> register_indirect(std::span<const IndirectPiece> pieces, uint64_t access);

  // Whether MRs for `request` may share a cached NIC registration, and under which key.
  bool cacheable(const MrRequest& request) const;
  CacheKey cache_key(const MrRequest& request) const;
  // The negotiated mr_cnt: open MRs, and registrations held at the NIC (0: no limit).
  size_t mr_cnt() const { return mr_cnt_; }
  // The bound on host bytes pinned at the NIC, and where it comes from (hmr_md_attr).
  const PinnedLimit& pinned_limit() const { return pinned_limit_; }
  RegistrationCache* cache() const { return cache_.get(); }
  // The same for device memory (and runtime memory the CPU can reach), reaching the NIC
  // through `mode`: a cache of its own, whose monitor is the device runtimes' (DeviceMonitor).
  bool device_cacheable(const MrRequest& request) const;
  // Whether what names the request's allocation (iface, base, id, length) names no later
  // allocation at the address: it has an id that is never reused (CUDA's BUFFER_ID, Level
  // Zero's), or hmr hears of its free (ROCr's callback set; the application's reports, where
  // it promised them or the runtime reports nothing).  Only such memory is cached, and only
  // its dma-buf export is shared with other registrations.
  bool allocation_told_apart(const MrRequest& request) const;
  CacheKey device_cache_key(const MrRequest& request, ExportMode mode) const;
  // Before an entry of this iface's memory may be filed in the device cache (device_ifaces_filed_).
  void note_device_iface_filed(int iface) {
    const uint32_t bit = 1u << iface;
    if ((device_ifaces_filed_.load(std::memory_order_relaxed) & bit) == 0) {
      device_ifaces_filed_.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  RegistrationCache* device_cache() const { return device_cache_.get(); }
  DeviceCacheBackend& device_backend() { return device_backend_; }
  // How device memory may reach this domain's NIC (the export decision, core/export_policy.h).
  ExportPlan plan_export(const hmem::PointerInfo& memory, ExportInputs& inputs) const;
  // HMR_HMEM_IFACE_BIT sets of the loaded runtimes whose device memory reaches the NIC by
  // each path on every one of their devices, as plan_export decides it (hmr_md_attr's
  // dmabuf_mem_types and peer_direct_mem_types).  One plan per device answers both.
  struct DeviceMemoryPaths {
    uint64_t dmabuf = 0;
    uint64_t peer_direct = 0;
  };
  DeviceMemoryPaths device_memory_paths() const;
  // Drops this domain's cached registrations overlapping [start, end) (hmr_mem_invalidate).
  void invalidate(uintptr_t start, uintptr_t end);
  hmr_domain_stats statistics();
  void flush_cache();

  // Every NIC registration of the domain goes through here (registration/nic_registrar.h).
  NicRegistrar& nic_registrar() { return nic_registrar_; }
  // The NIC's registration cost (hmr_md_query), measured on first use when the NIC has no
  // figure of its own (core/registration_cost.h; defined in domain_registration_cost.cpp).
  Result<nic::LinearCost> registration_cost();

  nic::Nic& nic() const { return *nic_; }
  const DomainRules& rules() const { return rules_; }
  bool has_mode(uint64_t bit) const { return (rules_.mr_mode & bit) != 0; }
  bool raw_keys() const { return has_mode(HMR_MR_RAW); }
  MappedRawKeys& mapped_keys() { return mapped_keys_; }
  // A peer's key as this domain's transfers take it (hmr_mr_map_raw, hmr_rkey_unpack): in a
  // RAW domain a mapping, released with unmap_peer_key; otherwise the key's 64-bit value.
  // A key of another size than the domain's is refused.
  Result<uint64_t> map_peer_key(const KeyBytes& key);
  Status unmap_peer_key(uint64_t key);
  DomainStats& stats() { return stats_; }
  EventQueue* event_queue() const { return event_queue_; }

  void object_opened() { open_objects_.fetch_add(1); }
  void object_closed() { open_objects_.fetch_sub(1); }

 private:
  Domain(std::unique_ptr<nic::Nic> nic, const DomainRules& rules, const Environment& environment);
  Status open_cache(const hmr_domain_attr& attr, hmr_domain_attr* negotiated);
  // Leaves the export holders' list, destroys both caches (each deregisters what it holds and
  // leaves its monitor and the reaper) and releases the monitor.  Once only matters: the
  // domain's close, before the NIC closes; the destructor again (nothing left to do then).
  void release_caches();
  // The host cache under one monitor; leaves cache_ and monitor_ unset when it cannot start.
  // A cache of this domain's NIC (kept off hmr's own threads where the application
  // serializes the NIC's calls), not yet attached.
  std::unique_ptr<RegistrationCache> new_cache(CacheBackend& backend, const CacheLimits& limits,
                                               Monitor* monitor) const;
  Status open_host_cache(const char* monitor_name, const CacheLimits& limits);
  Status open_device_cache(const CacheLimits& limits);
  // HMR_ENOSYS, with the NIC's reason, for an ODP request the NIC cannot serve.
  Status check_paging(const MrRequest& request) const;
  // Detects or verifies what the request's memory is (before any lock or NIC call).
  Status resolve(MrRequest& request);
  Status reserve_mr_slot();
  void release_mr_slot();
  Status mr_cnt_reached() const;
  // A full-path MR's slot (taken with reserve_mr_slot) and its requested key once reserved,
  // given back unless handed_out() (the failure is counted by the call's
  // RegistrationFailureTally): on every return, and when a step throws (out of memory: the slot stayed taken, and the domain, counting an MR
  // nobody could close, never closed).
  class MrSlotReservation {
   public:
    explicit MrSlotReservation(Domain& domain) : domain_(domain) {}
    ~MrSlotReservation();
    MrSlotReservation(const MrSlotReservation&) = delete;
    MrSlotReservation& operator=(const MrSlotReservation&) = delete;
    void hold_key(uint64_t key) {
      key_ = key;
      holds_key_ = true;
    }
    void handed_out() { handed_out_ = true; }

   private:
    Domain& domain_;
    uint64_t key_ = 0;  // (no std::optional: GCC 12 warns it may be read uninitialized)
    bool holds_key_ = false;
    bool handed_out_ = false;
  };
  // Whether a validated, resolved request is one the hit path would serve: plain host memory
  // the cache shares, in a synchronous domain (core/hit_path.cpp).
  bool shared_like_a_hit(const MrRequest& request) const;
  // The key the hit path looks up for `access`: hit_key_ with those access bits.
  CacheKey hit_key(uint64_t access) const {
    CacheKey key = hit_key_;
    key.access = static_cast<uint16_t>(access);
    return key;
  }
  // Its registration: the cache's entry (found, or registered and filed) as a CachedMr;
  // nullopt when an event queue was bound meanwhile (the MR is then the full path's).
  std::optional<Result<Registered>> register_shared(const MrRequest& request,
                                                    RegistrationCache::Probe probed);
  // Counts a hit-path MR of `length` bytes open; false, with nothing counted, when an event
  // queue has been bound (bind_event_queue() pairs with it).
  bool open_shared(ThreadSlot slot, uint64_t length);
  void close_shared(ThreadSlot slot, uint64_t length);
  // A pooled handle for `handle` (the caller holds an mr_cnt credit and counted it open).
  CachedMr* hand_out(RegistrationCache& cache, const CacheHandle& handle, uintptr_t start,
                     uint64_t length, uint64_t access, void* context, ThreadSlot slot);
  // The two hit paths' shared steps: their argument checks, and the credit, open count and
  // handle for a reference the lookup took (given back when refused).
  bool hit_arguments_ok(const void* buf, size_t len, uint64_t access) const;
  CachedMr* claim_hit(RegistrationCache& cache, const CacheHandle& handle, uintptr_t start,
                      uint64_t length, uint64_t access, void* context, ThreadSlot slot);
  // MRs open now: full MemoryRegions and the hit path's CachedMrs.
  int64_t open_mr_count() const;
  // Whether hmr_mr_reg may try the hit path in this domain (decided once, at open).
  void enable_hit_path();

  std::unique_ptr<nic::Nic> nic_;
  DomainRules rules_;
  Environment environment_;
  size_t mr_cnt_ = 0;
  PinnedLimit pinned_limit_;
  std::atomic<size_t> open_mrs_{0};  // MRs of the full path; hits count in hit_counters_
  // mr_cnt, enforced for both paths without a shared counter on the hit path.
  CreditPool mr_credits_;
  std::atomic<int> open_objects_{0};  // counters and endpoints
  RequestedKeys requested_keys_;
  MappedRawKeys mapped_keys_;
  DomainStats stats_;
  RegistrationCostModel registration_cost_;
  NicRegistrar nic_registrar_;  // after nic_ and rules_: built from them

  std::mutex bind_mutex_;
  EventQueue* event_queue_ = nullptr;
  std::unique_ptr<AsyncRegistrar> registrar_;

  Monitor* monitor_ = nullptr;
  std::unique_ptr<RegistrationCache> cache_;  // after nic_: destroyed (flushed) before it
  bool copies_allowed_ = false;  // HMR_DOMAIN_ALLOW_HMEM_COPY
  bool declares_memory_ = false;  // the application supports HMR_MR_HMEM
  DeviceCacheBackend device_backend_{nic_registrar_};

  // The hit path's state: whether it may serve this domain, the cache key its requests share
  // (access filled in per call), and its counters, per thread (summed by statistics()).
  bool hit_path_ = false;
  bool device_hit_path_ = false;  // the device cache exists and shares as the host one does
  std::atomic<bool> async_bound_{false};  // an event queue took over registration
  CacheKey hit_key_;
  enum HitCounter { kHitRegistrations, kHitOpen, kHitBytes, kHitCounters };
  ShardedCounters<kHitCounters> hit_counters_;
  std::unique_ptr<RegistrationCache> device_cache_;  // after its backend: destroyed first
  RecentDeviceRanges recent_device_;  // device hits a thread may repeat without the runtime
  // The runtimes (bit 1 << iface) whose memory this domain's device cache was ever asked to
  // hold, set before the entry is filed and never cleared: a hit asks only these runtimes
  // (another's memory cannot be found cached), so it costs one question to its own runtime
  // whatever else is loaded.  Read relaxed: a bit seen late is a miss, never a wrong hit.
  std::atomic<uint32_t> device_ifaces_filed_{0};
  CacheKey device_hit_key(uint64_t access, const DeviceDeclaration& declared, int iface,
                          uint64_t device, uint64_t alloc_id, ExportMode mode) const;
  // try_device_hit's answer from a hint that needs no question to the runtime, or nullptr.
  CachedMr* hit_from_hint(uintptr_t start, size_t len, uint64_t access, void* context,
                          const DeviceDeclaration& declared,
                          const RecentDeviceRanges::Identity& known, ThreadSlot slot);
  // Whether the application promised to report the frees of this iface's memory
  // (HMR_CUDA_FREES_REPORTED), so its hits may be served from a hint.
  bool frees_reported_by_application(int iface) const {
    return iface == HMR_HMEM_CUDA && environment_.cuda_frees_reported;
  }
  // Records the calling thread's device hit on `entry` as a hint.
  void remember_device_hit(ThreadSlot slot, const CacheEntry& entry, uint64_t generation,
                           bool any_device);

  // Gives back the caches' unused registrations, host and device, when the NIC refuses one
  // for resources, and the device cache's when a dma-buf export finds no file descriptor
  // (registration/nic_pressure.h); the registrar asks it.
  class CachePressureRelief final : public NicPressureRelief {
   public:
    explicit CachePressureRelief(Domain& domain) : domain_(domain) {}
    size_t release_unused(size_t count, Shortage shortage) override;
    size_t release_unused_exports(size_t count, ExportRelief which) override;

   private:
    Domain& domain_;
  };
  CachePressureRelief pressure_relief_{*this};
  bool listed_as_export_holder_ = false;  // in ExportHolders, for other domains' exports

  friend class MemoryRegion;
};

}  // namespace hmr::core
