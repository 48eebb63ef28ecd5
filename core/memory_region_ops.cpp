// MemoryRegion's memory operations beyond registration: re-registration (verbs' ibv_rereg_mr),
// prefetch advice (UCX's mem_advise), indirect keys over other MRs, and the use count that
// windows and indirect keys hold on an MR.
#include <cstring>

#include "core/cached_mr.h"
#include "core/domain.h"
#include "core/memory_region.h"
#include "hmem/hmem_registry.h"

namespace hmr::core {
namespace {

using ull = unsigned long long;

}  // namespace

Status MemoryRegion::check_unused() const {
  const int users = users_.load(std::memory_order_acquire);
  if (users == 0) return ok_status();
  return make_error(HMR_EBUSY, "%d memory window(s) or indirect key(s) use this MR; invalidate "
                    "or close them first", users);
}

Status MemoryRegion::check_rereg_flags(uint64_t flags) {
  constexpr uint64_t kReregFlags =
      HMR_MR_REREG_TRANSLATION | HMR_MR_REREG_ACCESS | HMR_MR_REREG_PD;
  if (flags == 0 || (flags & ~kReregFlags) != 0) {
    return make_error(HMR_EBADFLAGS, "hmr_mr_rereg flags %#llx: give HMR_MR_REREG_TRANSLATION, "
                      "HMR_MR_REREG_ACCESS and/or HMR_MR_REREG_PD", static_cast<ull>(flags));
  }
  return ok_status();
}

Result<nic::ReregRequest> MemoryRegion::rereg_request(uint64_t flags,
                                                      const hmr_mr_rereg_attr& attr) const {
  nic::ReregRequest request;
  if (flags & HMR_MR_REREG_TRANSLATION) {
    HMR_RETURN_IF_ERROR(validate_segments(attr.mr_iov, attr.iov_count, domain_.rules()));
    request.translation.assign(attr.mr_iov, attr.mr_iov + attr.iov_count);
    // The new range must be host memory, as the MR's is: a device range has its own paths.
    for (const iovec& segment : request.translation) {
      Result<hmem::PointerInfo> memory =
          hmem::Registry::global().classify(segment.iov_base, segment.iov_len);
      if (!memory.ok()) return memory.status();
      if (memory->iface != HMR_HMEM_SYSTEM) {
        return make_error(HMR_EOPNOTSUPP, "the new range [%p, +%zu) is %s memory; re-registration "
                          "moves host MRs over host memory", segment.iov_base, segment.iov_len,
                          hmem::iface_name(memory->iface));
      }
    }
    if (!request_.on_demand_paging()) {
      HMR_RETURN_IF_ERROR(domain_.nic_registrar().check_allocated(request.translation));
    }
  }
  if (flags & HMR_MR_REREG_ACCESS) {
    if (attr.access == 0 || (attr.access & ~kKnownAccess) != 0) {
      return make_error(HMR_EINVAL, "re-registration access %#llx: name known access bits",
                        static_cast<ull>(attr.access));
    }
    request.access = attr.access;
  }
  if (flags & HMR_MR_REREG_PD) {
    if (attr.nic_pd == nullptr) {
      return make_error(HMR_EINVAL, "HMR_MR_REREG_PD needs attr->nic_pd, the NIC's protection "
                                    "domain to move the registration to");
    }
    request.protection_domain = attr.nic_pd;
  }
  return request;
}

Result<nic::Registration> MemoryRegion::private_registration(
    const nic::ReregRequest& change) const {
  const std::span<const iovec> segments =
      change.translation.empty() ? std::span<const iovec>(request_.segments) : change.translation;
  nic::RegistrationRequest request = domain_.nic_registrar().request_for(
      segments, change.access ? *change.access : request_.access);
  return domain_.nic_registrar().register_memory(request);
}

void MemoryRegion::apply_rereg(const nic::ReregRequest& request) {
  const uint64_t old_bytes = request_.counted_bytes();
  if (!request.translation.empty()) request_.segments = request.translation;
  if (request.access) request_.access = *request.access;
  if (promoted_from_ != nullptr) {  // a hit's bytes are counted by the hit path's counters
    domain_.hit_counters_.add(Domain::kHitBytes, static_cast<int64_t>(request_.counted_bytes()) -
                                                     static_cast<int64_t>(old_bytes));
    return;
  }
  domain_.stats().record_mr_close(old_bytes);
  domain_.stats().record_mr_open(request_.counted_bytes());
}

void MemoryRegion::publish_to_hit() {
  if (promoted_from_ == nullptr) return;
  promoted_from_->publish(desc(), key());
}

Status MemoryRegion::rereg(uint64_t flags, const hmr_mr_rereg_attr& attr) {
  Result<nic::ReregRequest> request = rereg_request(flags, attr);
  if (!request.ok()) return request.status();
  HMR_RETURN_IF_ERROR(check_registered());
  if (indirect()) {
    return make_error(HMR_EINVAL, "an indirect key is not re-registered: close it and build "
                                  "another");
  }
  // (A device hold, an export or a shadow, exists only for device memory.)
  if (request_.dmabuf || request_.device_memory()) {
    return make_error(HMR_EOPNOTSUPP, "re-registration moves host MRs; this one is a dma-buf or "
                                      "device memory (close it and register again)");
  }
  if (request_.implicit_odp() && !request->translation.empty()) {
    return make_error(HMR_EINVAL, "an implicit ODP MR covers every address; it has no "
                                  "translation to change");
  }
  const nic::Support available = domain_.operation_support(HMR_MD_OP_REREG);
  if (!available.available) return make_error(HMR_ENOSYS, "%s", available.reason.c_str());

  // No lock of hmr's is held across the NIC's call (a callback NIC may call hmr back); calls
  // on this same MR during a rereg are the caller's race, as with ibv_rereg_mr.
  HMR_RETURN_IF_ERROR(check_unused());
  const bool pins_pages =
      !(request_.on_demand_paging() || domain_.nic().capabilities().on_demand_paging);
  if (cache_handle_) {
    // Other MRs share this registration: change a copy of the MR's own instead, and keep the
    // shared one until the copy succeeded, so a failure leaves this MR as it was.
    // The new range and access are registered as they are (the old range may be gone
    // already: moving off freed memory is why one re-registers); only a new protection domain
    // needs a registration to move, so that one is registered in place and then moved.
    nic::ReregRequest in_place;
    in_place.protection_domain = request->protection_domain;
    Result<nic::Registration> own =
        private_registration(in_place.protection_domain ? nic::ReregRequest() : *request);
    if (!own.ok()) return own.status();
    nic::Registration copy = *own;
    if (in_place.protection_domain != nullptr) {
      bool usable = true;  // (the copy is deregistered either way)
      Status changed = domain_.nic_registrar().rereg(copy, *request, pins_pages, &usable);
      if (changed.ok()) changed = domain_.nic_registrar().narrow_key(copy);
      if (!changed.ok()) {
        (void)domain_.nic_registrar().deregister_memory(copy);
        // What the NIC said of the copy ("usable only for deregistration; close it") is not
        // true of this MR, which never left the shared registration (hmr.h: a failure leaves
        // the MR as it was).
        return Status(changed.code(), changed.reason() + " (said of a private copy, now "
                      "deregistered: this MR is as it was, cached and usable)");
      }
    }
    handle_cache_->put_and_drop_if_unused(cache_handle_);
    cache_handle_ = CacheHandle();
    handle_cache_ = nullptr;
    registration_ = copy;
  } else {
    bool usable = true;
    Status changed = domain_.nic_registrar().rereg(registration_, *request, pins_pages, &usable);
    if (changed.ok()) {
      // A key wider than the domain's: the MR is registered under a key no peer of this
      // domain can be given, so it cannot be used any more.
      changed = domain_.nic_registrar().narrow_key(registration_);
      if (!changed.ok()) {
        state_.store(State::unusable, std::memory_order_release);
        publish_to_hit();
        return changed;
      }
    }
    if (!changed.ok()) {
      // (A refusal of hmr's, before the NIC was asked, left it as it was.)
      if (!usable) {
        state_.store(State::unusable, std::memory_order_release);
        publish_to_hit();
      }
      return changed;
    }
  }
  apply_rereg(*request);
  publish_to_hit();
  return ok_status();
}

Status MemoryRegion::advise(const void* addr, size_t len, int advice) {
  if (advice != HMR_MADV_NORMAL && advice != HMR_MADV_WILLNEED) {
    return make_error(HMR_EINVAL, "advice %d: use HMR_MADV_NORMAL or HMR_MADV_WILLNEED", advice);
  }
  const auto start = reinterpret_cast<uintptr_t>(addr);
  if (addr == nullptr || len == 0 || start + len < start || !contains(start, len)) {
    return make_error(HMR_EINVAL, "advice range [%p, +%zu) is not inside the MR", addr, len);
  }
  HMR_RETURN_IF_ERROR(check_registered());
  // Pinned memory is mapped already; only an ODP registration has pages to bring in.
  const bool on_demand =
      request_.on_demand_paging() || domain_.nic().capabilities().on_demand_paging;
  if (advice == HMR_MADV_NORMAL || !on_demand) return ok_status();
  const nic::Support available = domain_.operation_support(HMR_MD_OP_ADVISE);
  if (!available.available) return make_error(HMR_ENOSYS, "%s", available.reason.c_str());
  // Pages the NIC will write are prefetched writable: memory that is the target of remote
  // writes, of local reads (HMR_READ: an RDMA Read lands here) or of receives.  HMR_WRITE and
  // HMR_SEND are the NIC reading the buffer; mlx5 refuses a write-prefetch of an MR it may not
  // write (get_prefetchable_mr: EPERM), so those get the plain prefetch.
  const bool writes = (request_.access & (HMR_REMOTE_WRITE | HMR_READ | HMR_RECV)) != 0;
  const iovec range = {const_cast<void*>(addr), len};
  return domain_.nic().advise(registration_,
                              writes ? nic::Advice::prefetch_write : nic::Advice::prefetch,
                              {&range, 1}, /*flush=*/true);
}

Status MemoryRegion::register_indirect(std::vector<MemoryRegion*> parts,
                                       std::span<const nic::IndirectSegment> segments) {
  Result<nic::Registration> registered = domain_.nic_registrar().register_indirect(segments,
                                                                                   request_.access);
  if (!registered.ok()) return registered.status();
  registration_ = *registered;
  for (MemoryRegion* part : parts) part->add_user();
  indirect_parts_ = std::move(parts);
  state_.store(State::registered, std::memory_order_release);
  // Reachable at once unless the domain's rules say otherwise (MR_ENDPOINT: bind, then enable).
  Status published = ok_status();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    enabled_ = starts_enabled();
    if (!enabled_) published = publish_remote_access();
  }
  // A failed key goes here, not with the MR object (which the caller frees without a close):
  // the NIC's registration and the parts' counts were left behind.
  if (!published.ok()) (void)release();
  return published;
}

}  // namespace hmr::core
