// MemoryRegion: the application's MR handle.  It owns its NIC registration, its requested
// key, and its bindings to an endpoint and to counters; its state says whether a peer may
// reach it (enable) and whether an asynchronous registration has completed.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "cache/cache_handle.h"
#include "core/packed_rkey.h"
#include "nic/nic.h"
#include "registration/device_registration.h"
#include "registration/mr_request.h"
#include "util/object.h"
#include "util/status.h"

namespace hmr::core {

class CachedMr;
class Counter;
class Domain;
class Endpoint;

class MemoryRegion : public Tagged<ObjectClass::memory_region> {
 public:
  enum class State { pending, registered, failed };

  MemoryRegion(Domain& domain, MrRequest request);
  // A view of a cache hit's handle (core/cached_mr.h) for the calls other than key, desc and
  // close, so every rule of an MR is written once, here.  The view owns nothing: the CachedMr
  // keeps the cache reference, and the view must not be released.
  explicit MemoryRegion(const CachedMr& hit);

  Domain& domain() const { return domain_; }
  const MrRequest& request() const { return request_; }
  State state() const { return state_.load(std::memory_order_acquire); }

  // Registers on the NIC now (synchronous registration).
  Status register_now();
  // Run by the async worker: registers, posts the completion, then lets close() proceed.
  void complete_async_registration();
  // Waits for (or cancels) a pending asynchronous registration and withdraws its event.
  void settle_async_registration();
  // Deregisters and releases bindings; the object is deleted by the domain afterwards.
  Status release();  // the NIC's deregistration failure, if any (the MR is released anyway)

  void* desc() const;
  uint64_t key() const;
  Status raw_attr(uint64_t* base_addr, uint8_t* raw_key, size_t* key_size) const;
  // What a peer needs to reach this MR (hmr_rkey_pack).
  Result<PackedRkey> packed_rkey() const;
  Status bind_endpoint(Endpoint& endpoint, uint64_t flags);
  Status bind_counter(Counter& counter, uint64_t flags);
  Status enable();
  Status refresh(const iovec* iov, size_t count);
  // Host-shadow MRs: copies between the shadow and the device (flags: one HMR_SYNC_*
  // direction; len 0: to the end).  Other MRs: arguments checked, nothing to copy.
  Status sync(uint64_t offset, size_t len, uint64_t flags);
  Status query(hmr_mr_info& info) const;

 private:
  Status check_registered() const;
  // The address a peer targets for this MR's first byte (hmr_mr_raw_attr's base).
  uint64_t remote_first_byte() const;
  // Device memory (and runtime memory the CPU can reach): each path the export decision
  // allows, in order, through the device cache where it may be shared.
  Status register_device();
  Status publish_remote_access();  // caller holds mutex_
  bool starts_enabled() const;
  bool contains(const iovec& range) const;

  Domain& domain_;
  MrRequest request_;
  std::atomic<State> state_{State::pending};
  nic::Registration registration_;  // written before state_ becomes registered
  CacheHandle cache_handle_;  // the shared registration this MR holds, if cached
  RegistrationCache* handle_cache_ = nullptr;  // the domain cache cache_handle_ came from
  ExportMode export_mode_ = ExportMode::host_va;
  DeviceHold device_hold_;  // an uncached device registration's export or shadow

  std::mutex mutex_;  // bindings, enable state, async completion
  std::condition_variable async_done_cv_;
  bool async_done_ = false;
  bool enabled_ = false;
  Endpoint* endpoint_ = nullptr;
  struct CounterBinding {
    Counter* counter;
    uint64_t events;
  };
  std::vector<CounterBinding> counters_;
};

}  // namespace hmr::core
