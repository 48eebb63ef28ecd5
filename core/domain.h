// Domain: one NIC, the mr_mode negotiated with the application, and everything registered
// through it.  It validates every request before any lock or NIC call, and owns the
// asynchronous registration worker when an event queue is bound with HMR_REG_MR.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "core/cache/registration_cache.h"
#include "core/device_registration.h"
#include "core/export_policy.h"
#include "core/domain_stats.h"
#include "core/environment.h"
#include "core/key_registry.h"
#include "core/mr_request.h"
#include "core/registration_cost.h"
#include "core/object.h"
#include "core/status.h"
#include "nic/nic.h"

namespace hmr::core {

class AsyncRegistrar;
class EventQueue;
class MemoryRegion;

class Domain : public Tagged<ObjectClass::domain> {
 public:
  // `attr` is the caller's request, already read; on success `negotiated` holds the result.
  static Result<std::unique_ptr<Domain>> open(const hmr_domain_attr& attr,
                                              hmr_domain_attr* negotiated);
  ~Domain();

  // HMR_EBUSY while objects of the domain are open; otherwise stops the async worker.
  Status prepare_close();
  Status bind_event_queue(EventQueue& queue, uint64_t flags);

  Result<MemoryRegion*> register_memory(const hmr_mr_attr& attr, uint64_t flags);
  Status close_memory_region(MemoryRegion* region);

  // Whether MRs for `request` may share a cached NIC registration, and under which key.
  bool cacheable(const MrRequest& request) const;
  CacheKey cache_key(const MrRequest& request) const;
  RegistrationCache* cache() const { return cache_.get(); }
  // The same for device memory (and runtime memory the CPU can reach), reaching the NIC
  // through `mode`: a cache of its own, whose monitor is the device runtimes' (DeviceMonitor).
  bool device_cacheable(const MrRequest& request, ExportMode mode) const;
  CacheKey device_cache_key(const MrRequest& request, ExportMode mode) const;
  RegistrationCache* device_cache() const { return device_cache_.get(); }
  DeviceCacheBackend& device_backend() { return device_backend_; }
  // How device memory may reach this domain's NIC (the export decision, core/export_policy.h).
  ExportPlan plan_export(const hmem::PointerInfo& memory, ExportInputs& inputs) const;
  // Drops this domain's cached registrations overlapping [start, end) (hmr_mem_invalidate).
  void invalidate(uintptr_t start, uintptr_t end);
  hmr_domain_stats statistics();
  void flush_cache();

  // Registers on the NIC (after the ALLOCATED check) and counts it in the statistics.
  Result<nic::Registration> register_on_nic(const nic::RegistrationRequest& request);
  // The NIC request for `segments` under this domain's mode.
  nic::RegistrationRequest nic_request(std::span<const iovec> segments, uint64_t access) const;
  // The NIC's registration cost (hmr_md_query), measured on first use when the NIC has no
  // figure of its own (core/registration_cost.h; defined in domain_registration_cost.cpp).
  Result<nic::LinearCost> registration_cost();

  nic::Nic& nic() const { return *nic_; }
  const DomainRules& rules() const { return rules_; }
  bool has_mode(uint64_t bit) const { return (rules_.mr_mode & bit) != 0; }
  bool raw_keys() const { return has_mode(HMR_MR_RAW); }
  MappedRawKeys& mapped_keys() { return mapped_keys_; }
  DomainStats& stats() { return stats_; }
  EventQueue* event_queue() const { return event_queue_; }

  void object_opened() { open_objects_.fetch_add(1); }
  void object_closed() { open_objects_.fetch_sub(1); }

 private:
  Domain(std::unique_ptr<nic::Nic> nic, const DomainRules& rules, const Environment& environment);
  Status open_cache(const hmr_domain_attr& attr, hmr_domain_attr* negotiated);
  Status open_device_cache(const CacheLimits& limits);
  // Detects or verifies what the request's memory is (before any lock or NIC call).
  Status resolve(MrRequest& request);
  // HMR_EFAULT unless every page of `segments` is mapped (ALLOCATED domains).  Checked where
  // a NIC registration is made: a cache hit proves the range was mapped and still is.
  Status check_allocated(std::span<const iovec> segments) const;
  Status reserve_mr_slot();


  std::unique_ptr<nic::Nic> nic_;
  DomainRules rules_;
  Environment environment_;
  size_t mr_cnt_ = 0;
  std::atomic<size_t> open_mrs_{0};
  std::atomic<int> open_objects_{0};  // counters and endpoints
  RequestedKeys requested_keys_;
  MappedRawKeys mapped_keys_;
  DomainStats stats_;
  RegistrationCostModel registration_cost_;

  std::mutex bind_mutex_;
  EventQueue* event_queue_ = nullptr;
  std::unique_ptr<AsyncRegistrar> registrar_;

  class CacheBackendAdapter final : public CacheBackend {
   public:
    explicit CacheBackendAdapter(Domain& domain) : domain_(domain) {}
    Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                             const CacheKey& key) override;
    void deregister(nic::Registration& registration) override;

   private:
    Domain& domain_;
  };
  CacheBackendAdapter cache_backend_{*this};
  Monitor* monitor_ = nullptr;
  std::unique_ptr<RegistrationCache> cache_;  // after nic_: destroyed (flushed) before it
  bool copies_allowed_ = false;  // HMR_DOMAIN_ALLOW_HMEM_COPY
  bool declares_memory_ = false;  // the application supports HMR_MR_HMEM
  DeviceCacheBackend device_backend_{*this};
  std::unique_ptr<RegistrationCache> device_cache_;  // after its backend: destroyed first

  friend class MemoryRegion;
};

}  // namespace hmr::core
