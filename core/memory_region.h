// MemoryRegion: the application's MR handle.  It owns its NIC registration, its requested
// key, and its bindings to an endpoint and to counters; its state says whether a peer may
// reach it (enable) and whether an asynchronous registration has completed.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "cache/cache_handle.h"
#include "core/event_queue.h"
#include "core/packed_rkey.h"
#include "nic/nic.h"
#include "registration/device_registration.h"
#include "registration/mr_request.h"
#include "util/object.h"
#include "util/status.h"
#include "util/unique_fd.h"

namespace hmr::core {

class CachedMr;
class Counter;
class Domain;
class Endpoint;

class MemoryRegion : public Tagged<ObjectClass::memory_region> {
 public:
  // unusable: registered on the NIC, but a re-registration failed there; only close is valid.
  enum class State { pending, registered, failed, unusable };

  MemoryRegion(Domain& domain, MrRequest request);
  // A view of a cache hit's handle (core/cached_mr.h) for the calls other than key, desc and
  // close, so every rule of an MR is written once, here.  The view owns nothing: the CachedMr
  // keeps the cache reference, and the view must not be released.
  explicit MemoryRegion(const CachedMr& hit);
  // A cache hit's handle made a MemoryRegion of its own (Domain::promote): it owns the hit's
  // cache reference from now on and keeps the hit's key and descriptor up to date.
  MemoryRegion(CachedMr& hit, bool promoted);

  Domain& domain() const { return domain_; }
  const MrRequest& request() const { return request_; }
  State state() const { return state_.load(std::memory_order_acquire); }

  // Registers on the NIC now (synchronous registration).
  Status register_now();
  // Run by the async worker: registers, posts the completion, then lets close() proceed.
  void complete_async_registration();
  // Waits for (or cancels) a pending asynchronous registration and withdraws its event.
  // Before it is handed to the asynchronous registrar (under the domain's bind lock), with the
  // room its completion event will take (EventQueue::reserve(): the worker posts it without
  // allocating).
  void mark_submitted(EventQueue::Reserved completion) {
    completion_ = std::move(completion);
    submitted_ = true;
  }
  // Before submitting: the caller's dma-buf (HMR_MR_DMABUF) is registered later, on the
  // worker's thread, after hmr_mr_regattr returned and the caller may have closed its fd (as
  // it may after a synchronous call, and as libfabric's verbs and EFA register at once even
  // under FI_REG_MR).  The MR keeps a duplicate, closed with it.  EMFILE and the like: the
  // registration fails now.
  Status keep_caller_dmabuf();
  bool submitted() const { return submitted_; }
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

  // hmr_mr_rereg (core/memory_region_ops.cpp).  A shared cached registration is replaced by
  // one of the MR's own first; a NIC failure leaves the MR unusable.  `flags` have passed
  // check_rereg_flags: the C ABI checks them before a cache-hit handle is promoted for this.
  static Status check_rereg_flags(uint64_t flags);
  Status rereg(uint64_t flags, const hmr_mr_rereg_attr& attr);
  // hmr_mem_advise: prefetch for ODP MRs, nothing to do for pinned ones.
  // `advice`: the bits of the caller's enum hmr_mem_advice, any int (checked here).
  Status advise(const void* addr, size_t len, int advice);
  // An indirect key's MR (Domain::register_indirect): registers `segments` on the NIC and holds
  // each MR they lie in until release.
  Status register_indirect(std::vector<MemoryRegion*> parts,
                           std::span<const nic::IndirectSegment> segments);
  bool indirect() const { return !indirect_parts_.empty(); }

  // Memory windows bound to this MR and indirect keys over it: while there are any, close and
  // rereg are refused (HMR_EBUSY), as verbs refuses to deregister an MR with bound windows.
  void add_user() { users_.fetch_add(1, std::memory_order_acq_rel); }
  void drop_user() { users_.fetch_sub(1, std::memory_order_acq_rel); }
  Status check_unused() const;
  Status check_registered() const;
  const nic::Registration& registration() const { return registration_; }
  // Whether [start, start + len) lies inside one of the MR's segments.
  bool contains(uintptr_t start, size_t len) const;

 private:
  // The address a peer targets for this MR's first byte (hmr_mr_raw_attr's base).
  uint64_t remote_first_byte() const;
  // How far into its cached registration (export, shadow, key range) this MR's first byte
  // lies; 0 for an MR with a registration of its own.
  uint64_t offset_in_cache_entry() const;
  // A host-shadow MR's shadow (its own, or its cache entry's) and where the MR's first byte
  // lies in it; nullptr for every other path.
  ShadowBuffer* host_shadow(uint64_t* offset_of_first_byte) const;
  // Device memory (and runtime memory the CPU can reach): each path the export decision
  // allows, in order, through the device cache where it may be shared.
  Status register_device();
  Status publish_remote_access();  // caller holds mutex_
  bool starts_enabled() const;
  // rereg's pieces (core/memory_region_rereg.cpp).
  Result<nic::ReregRequest> rereg_request(uint64_t flags, const hmr_mr_rereg_attr& attr) const;
  // Replaces a shared cached registration by one of the MR's own with the same range and access.
  // (with the change's range and access, or the MR's own when it has none)
  Result<nic::Registration> private_registration(const nic::ReregRequest& change) const;
  void apply_rereg(const nic::ReregRequest& request);
  void publish_to_hit();  // the promoted hit's copy of key and descriptor

  Domain& domain_;
  MrRequest request_;
  std::atomic<State> state_{State::pending};
  nic::Registration registration_;  // written before state_ becomes registered
  CacheHandle cache_handle_;  // the shared registration this MR holds, if cached
  RegistrationCache* handle_cache_ = nullptr;  // the domain cache cache_handle_ came from
  ExportMode export_mode_ = ExportMode::host_va;
  DeviceHold device_hold_;  // an uncached device registration's export or shadow
  UniqueFd kept_dmabuf_;    // keep_caller_dmabuf's duplicate of the caller's dma-buf fd

  std::mutex mutex_;  // bindings, enable state, async completion
  std::condition_variable async_done_cv_;
  bool async_done_ = false;
  // Handed to the domain's asynchronous registrar (mark_submitted): only such an MR has a
  // completion to settle at close.  An indirect key registers at once even in a domain bound
  // to an event queue, and waiting for a completion it never gets hung its close.
  bool submitted_ = false;
  EventQueue::Reserved completion_;  // a submitted MR's completion event, posted by the worker
  bool enabled_ = false;
  Endpoint* endpoint_ = nullptr;
  struct CounterBinding {
    Counter* counter;
    uint64_t events;
  };
  std::vector<CounterBinding> counters_;

  std::atomic<int> users_{0};
  std::vector<MemoryRegion*> indirect_parts_;  // the MRs an indirect key lies in
  CachedMr* promoted_from_ = nullptr;  // the hit handle this MR stands behind, if any
};

}  // namespace hmr::core
