#include "core/memory_region.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "core/async_registrar.h"
#include "core/cached_mr.h"
#include "core/counter.h"
#include "core/domain.h"
#include "core/endpoint.h"
#include "core/event_queue.h"
#include "hmem/hmem_registry.h"
#include "hmem/system_iface.h"
#include "registration/memory_resolution.h"

namespace hmr::core {

MemoryRegion::MemoryRegion(Domain& domain, MrRequest request)
    : domain_(domain), request_(std::move(request)) {}

MemoryRegion::MemoryRegion(const CachedMr& hit) : domain_(hit.domain()) {
  request_.segments.push_back({reinterpret_cast<void*>(hit.start()), hit.length()});
  request_.access = hit.access();
  request_.context = hit.context();
  const CacheKey& key = hit.handle().entry->key;  // fixed while the entry is held
  if (key.iface == HMR_HMEM_SYSTEM) {
    request_.memory = hmem::host_pointer_info(reinterpret_cast<void*>(hit.start()), hit.length());
  } else {
    // A device hit (Domain::try_device_hit): what the memory is, asked in full now (rare: an
    // operation beyond key, desc and close), and the path its registration took.
    request_.iface = static_cast<hmr_hmem_iface>(key.iface);
    request_.device = static_cast<uint64_t>(static_cast<uint32_t>(key.device));
    Result<hmem::PointerInfo> memory = hmem::Registry::global().verify(
        key.iface, request_.device, reinterpret_cast<void*>(hit.start()), hit.length());
    if (memory.ok()) {
      request_.memory = std::move(*memory);
    } else {  // (freed meanwhile: the MR stays what it was registered as)
      request_.memory.iface = key.iface;
      request_.memory.device = hmem::DeviceId{request_.device};
      request_.memory.kind = hmem::MemoryKind::device_only;
      request_.memory.alloc_id = key.alloc_id;
    }
    export_mode_ = static_cast<ExportMode>(key.export_mode);
  }
  cache_handle_ = hit.handle();
  handle_cache_ = &hit.cache();
  registration_ = hit.handle().registration();
  enabled_ = true;  // a shared registration is never disabled: nothing binds to it
  state_.store(State::registered, std::memory_order_release);
}

MemoryRegion::MemoryRegion(CachedMr& hit, bool) : MemoryRegion(static_cast<const CachedMr&>(hit)) {
  promoted_from_ = &hit;
}

bool MemoryRegion::starts_enabled() const {
  if (domain_.has_mode(HMR_MR_ENDPOINT)) return false;
  return !(domain_.has_mode(HMR_MR_RMA_EVENT) && (request_.flags & HMR_RMA_EVENT));
}

Status MemoryRegion::register_now() {
  if (request_.device_memory() && !request_.dmabuf) return register_device();
  if (domain_.cacheable(request_)) {
    const iovec& segment = request_.segments[0];
    Result<CacheHandle> handle = domain_.cache()->get(
        reinterpret_cast<uintptr_t>(segment.iov_base), segment.iov_len, domain_.cache_key(request_));
    if (!handle.ok()) return handle.status();
    cache_handle_ = *handle;
    handle_cache_ = domain_.cache();
    registration_ = cache_handle_.registration();
    enabled_ = true;  // a shared registration is never disabled: nothing binds to it
    state_.store(State::registered, std::memory_order_release);
    return ok_status();
  }
  nic::RegistrationRequest nic_request = domain_.nic_registrar().request_for(request_.segments, request_.access);
  nic_request.dmabuf = request_.dmabuf ? &*request_.dmabuf : nullptr;
  nic_request.flags = request_.flags;
  nic_request.requested_key = request_.requested_key;
  nic_request.iface = request_.iface;
  nic_request.device = request_.device;
  nic_request.hmem_data = request_.hmem_data;
  nic_request.page_size = request_.page_size;
  nic_request.on_demand_paging = request_.on_demand_paging();
  nic_request.enabled = starts_enabled();

  Result<nic::Registration> registered = domain_.nic_registrar().register_memory(nic_request);
  if (!registered.ok()) return registered.status();
  registration_ = *registered;
  enabled_ = nic_request.enabled;
  state_.store(State::registered, std::memory_order_release);
  return ok_status();
}

Status MemoryRegion::register_device() {
  const hmem::PointerInfo& memory = request_.memory;
  Result<hmem::Iface*> iface = hmem::Registry::global().loaded_iface(memory.iface);
  if (!iface.ok()) return iface.status();
  ExportInputs inputs;
  Result<hmem::DeviceCapabilities> caps =
      hmem::Registry::global().capabilities(memory.iface, memory.device);
  if (caps.ok()) {
    inputs.device = &*caps;
  } else {
    inputs.device_reason = caps.status().reason();
  }
  const ExportPlan plan = domain_.plan_export(memory, inputs);

  const iovec& segment = request_.segments[0];
  nic::RegistrationRequest nic_request = domain_.nic_registrar().request_for(request_.segments, request_.access);
  nic_request.flags = request_.flags;
  nic_request.requested_key = request_.requested_key;
  nic_request.hmem_data = request_.hmem_data;
  nic_request.page_size = request_.page_size;
  nic_request.enabled = starts_enabled();

  // Each path is tried in the plan's order until one registers.  The answer when none does is
  // the code of the first path tried (the best one the plan found usable: a later path's
  // failure, a shadow that cannot copy this memory, must not hide why it failed).  The NIC's
  // refusal for resources, after giving back what was idle (Status::nic_refusal), ends the
  // search with its code: it is the caller's to retry, and a worse path taken for a moment's
  // want (a host shadow, which copies) would stay cached.  A driver's export failing with the
  // same code does not: another path may not need the export.  Nor does an export that
  // found the descriptor table full with nothing idle to give back (Status::descriptor_shortage):
  // peer-direct needs no descriptor and is still tried, but a host shadow is not, for the same
  // reason as above.
  std::array<std::string, kExportModes> failures;
  int first_code = 0;
  bool descriptors_short = false;
  for (size_t i = 0; i < plan.count; ++i) {
    const ExportMode mode = plan.order[i];
    if (mode == ExportMode::host_shadow && descriptors_short) {
      failures[static_cast<size_t>(mode)] =
          "not tried: the process is short of file descriptors for a moment, and a copy taken "
          "for that would stay";
      continue;
    }
    Status failure;
    if (domain_.device_cacheable(request_)) {
      domain_.note_device_iface_filed(request_.memory.iface);
      Result<CacheHandle> handle = domain_.device_cache()->get(
          reinterpret_cast<uintptr_t>(segment.iov_base), segment.iov_len,
          domain_.device_cache_key(request_, mode), RegistrationCache::Probe::not_done,
          request_.device_cache_sequence);
      if (handle.ok()) {
        cache_handle_ = *handle;
        handle_cache_ = domain_.device_cache();
        registration_ = cache_handle_.registration();
        export_mode_ = mode;
        enabled_ = true;  // a shared registration is never disabled: nothing binds to it
        state_.store(State::registered, std::memory_order_release);
        return ok_status();
      }
      failure = handle.status();
    } else {
      DeviceHold hold;
      Result<nic::Registration> registered = register_device_range(
          domain_.nic_registrar(), nic_request, memory, **iface, segment, mode, hold,
          domain_.allocation_told_apart(request_));
      if (registered.ok()) {
        registration_ = *registered;
        device_hold_ = std::move(hold);
        export_mode_ = mode;
        enabled_ = nic_request.enabled;
        state_.store(State::registered, std::memory_order_release);
        return ok_status();
      }
      failure = registered.status();
    }
    failures[static_cast<size_t>(mode)] = failure.reason();
    if (first_code == 0) first_code = failure.code();
    if (failure.descriptor_shortage()) descriptors_short = true;
    if (failure.nic_refusal()) {
      Status refused = make_error(failure.code(), "%s (the %s path%s)", failure.reason().c_str(),
                                  export_mode_name(mode),
                                  i + 1 < plan.count ? "; the paths after it were not tried" : "");
      return refused.mark_nic_refusal();
    }
  }
  const int code = first_code != 0 ? first_code : HMR_EOPNOTSUPP;  // (0: no path was usable)
  if (memory.kind != hmem::MemoryKind::device_only) {
    // Memory the CPU reaches has one path; its failure is the answer.
    return make_error(code, "%s", failures[static_cast<size_t>(ExportMode::host_va)].c_str());
  }
  return make_error(code, "%s", describe_no_path(inputs, plan, failures).c_str());
}

Status MemoryRegion::sync(uint64_t offset, size_t len, uint64_t flags) {
  if (flags != HMR_SYNC_TO_DEVICE && flags != HMR_SYNC_FROM_DEVICE) {
    return make_error(HMR_EBADFLAGS, "hmr_mr_sync takes exactly one of HMR_SYNC_TO_DEVICE and "
                      "HMR_SYNC_FROM_DEVICE (got %#llx)", static_cast<unsigned long long>(flags));
  }
  const uint64_t length = request_.length();
  if (offset > length || len > length - offset) {
    return make_error(HMR_EINVAL, "sync of [%llu, +%zu) is outside the MR's %llu bytes",
                      static_cast<unsigned long long>(offset), len,
                      static_cast<unsigned long long>(length));
  }
  HMR_RETURN_IF_ERROR(check_registered());
  uint64_t shadow_offset = 0;
  ShadowBuffer* shadow = host_shadow(&shadow_offset);
  if (shadow == nullptr) {
    if (export_mode_ != ExportMode::host_shadow) return ok_status();  // the NIC reaches it itself
    // A held cache entry always has its shadow; never report a copy that was not made.
    return make_error(HMR_EIO, "hmr_mr_sync: the host shadow of this MR's cache entry is gone");
  }
  const size_t count = len != 0 ? len : static_cast<size_t>(length - offset);
  if (count == 0) return ok_status();
  return flags == HMR_SYNC_TO_DEVICE ? shadow->copy_to_device(shadow_offset + offset, count)
                                     : shadow->copy_from_device(shadow_offset + offset, count);
}

ShadowBuffer* MemoryRegion::host_shadow(uint64_t* offset_of_first_byte) const {
  *offset_of_first_byte = 0;
  if (export_mode_ != ExportMode::host_shadow) return nullptr;
  if (!cache_handle_) return device_hold_.shadow.get();
  // A cached shadow covers its entry, which may begin before this MR.
  std::optional<DeviceCacheBackend::ExportView> view =
      domain_.device_backend().view(cache_handle_.registration());
  if (!view) return nullptr;
  *offset_of_first_byte = offset_in_cache_entry();
  return view->shadow;
}

Status MemoryRegion::query(hmr_mr_info& info) const {
  HMR_RETURN_IF_ERROR(check_registered());
  info.iface = static_cast<hmr_hmem_iface>(request_.memory.iface);
  info.device = request_.memory.device.value;
  info.kind = public_kind(request_.memory.kind);
  info.cached = cache_handle_ ? 1 : 0;
  info.dmabuf_fd = -1;
  info.dmabuf_offset = 0;
  info.shadow = nullptr;
  if (request_.dmabuf) {
    info.path = HMR_MR_PATH_CALLER_DMABUF;
    return ok_status();
  }
  switch (export_mode_) {
    case ExportMode::host_va: info.path = HMR_MR_PATH_ADDRESS; break;
    case ExportMode::dmabuf: info.path = HMR_MR_PATH_DMABUF; break;
    case ExportMode::peer_direct: info.path = HMR_MR_PATH_PEER_DIRECT; break;
    case ExportMode::host_shadow: info.path = HMR_MR_PATH_HOST_SHADOW; break;
  }
  if (export_mode_ == ExportMode::dmabuf) {
    if (cache_handle_) {
      std::optional<DeviceCacheBackend::ExportView> view =
          domain_.device_backend().view(cache_handle_.registration());
      if (view) {
        info.dmabuf_fd = view->dmabuf_fd;
        info.dmabuf_offset = view->dmabuf_offset + offset_in_cache_entry();
      }
    } else if (device_hold_.dmabuf) {
      info.dmabuf_fd = device_hold_.dmabuf->fd();
      info.dmabuf_offset = device_hold_.dmabuf_offset;
    }
  }
  uint64_t shadow_offset = 0;
  if (ShadowBuffer* shadow = host_shadow(&shadow_offset)) {
    info.shadow = static_cast<char*>(shadow->host()) + shadow_offset;
  }
  return ok_status();
}

void MemoryRegion::complete_async_registration() {
  // On hmr's thread, where an exception would end the process: out of memory is this
  // registration's failure (register_now leaves nothing registered when it throws).
  Status status = [this] {
    try {
      return register_now();
    } catch (const std::bad_alloc&) {
      return out_of_memory();
    } catch (...) {  // (as the C ABI's guard answers any other exception)
      return Status(HMR_EIO, "internal error");
    }
  }();
  if (!status.ok()) state_.store(State::failed, std::memory_order_release);
  domain_.stats().record_registration(status.ok());
  domain_.event_queue()->post(std::move(completion_), to_handle<hmr_fid>(this), request_.context,
                              std::move(status));
  // Notify under the lock: once it is released, close() may delete this MR at any moment.
  std::lock_guard<std::mutex> lock(mutex_);
  async_done_ = true;
  async_done_cv_.notify_all();
}

void MemoryRegion::settle_async_registration() {
  if (domain_.registrar_ && domain_.registrar_->cancel(this)) {
    state_.store(State::failed, std::memory_order_release);  // never registered
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    async_done_cv_.wait(lock, [this] { return async_done_; });
  }
  domain_.event_queue()->withdraw(to_handle<hmr_fid>(this));
}

Status MemoryRegion::keep_caller_dmabuf() {
  if (!request_.dmabuf) return ok_status();
  const int copy = fcntl(request_.dmabuf->fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    const int err = errno;
    return make_error(err == EMFILE || err == ENFILE ? HMR_ENOMEM : HMR_EINVAL,
                      "the dma-buf fd %d could not be kept for the asynchronous registration "
                      "(fcntl F_DUPFD_CLOEXEC: %s)", request_.dmabuf->fd, std::strerror(err));
  }
  kept_dmabuf_.reset(copy);
  request_.dmabuf->fd = copy;
  return ok_status();
}

Status MemoryRegion::release() {
  Status deregistered = ok_status();
  if (cache_handle_ && (state() == State::registered || state() == State::unusable)) {
    handle_cache_->put(cache_handle_);  // the cache deregisters when the entry dies
  } else if (state() == State::registered || state() == State::unusable) {
    deregistered = domain_.nic_registrar().deregister_memory(registration_);
    device_hold_ = DeviceHold();  // after the NIC let go: closes the export, unmaps the shadow
    for (MemoryRegion* part : indirect_parts_) part->drop_user();  // after the key is gone
    indirect_parts_.clear();
  }
  // Unbound once the NIC let go: until then a remote access in progress may still count into
  // a bound counter (the sim NIC's deregistration waits for it), and a counter no MR is bound
  // to may close (hmr_cntr_close), its storage then the next object's.
  std::lock_guard<std::mutex> lock(mutex_);
  if (endpoint_ != nullptr) endpoint_->unbind_mr();
  for (const CounterBinding& binding : counters_) binding.counter->unbind_mr();
  endpoint_ = nullptr;
  counters_.clear();
  return deregistered;
}

Status MemoryRegion::check_registered() const {
  switch (state()) {
    case State::registered: return ok_status();
    case State::pending:
      return make_error(HMR_EAGAIN, "MR registration has not completed yet (read its event)");
    case State::failed: break;
    case State::unusable:
      return make_error(HMR_EINVAL, "the NIC failed to re-register this MR; only hmr_mr_close is "
                                    "valid on it");
  }
  return make_error(HMR_EINVAL, "MR registration failed; close the MR");
}

void* MemoryRegion::desc() const {
  return state() == State::registered ? registration_.desc : nullptr;
}

uint64_t MemoryRegion::key() const {
  if (state() != State::registered || domain_.raw_keys()) return HMR_KEY_NOTAVAIL;
  return registration_.key.low_u64();
}

Status MemoryRegion::raw_attr(uint64_t* base_addr, uint8_t* raw_key, size_t* key_size) const {
  if (key_size == nullptr || base_addr == nullptr) {
    return make_error(HMR_EINVAL, "raw_attr needs base_addr and key_size");
  }
  HMR_RETURN_IF_ERROR(check_registered());
  const KeyBytes& key = registration_.key;
  if (*key_size < key.size) {
    const size_t given = *key_size;
    *key_size = key.size;  // the one output written on failure: the size needed
    return make_error(HMR_ETOOSMALL, "raw key needs %zu bytes, buffer has %zu", key.size, given);
  }
  if (raw_key == nullptr) return make_error(HMR_EINVAL, "raw_key buffer is NULL");
  std::memcpy(raw_key, key.bytes, key.size);
  *key_size = key.size;
  *base_addr = remote_first_byte();
  return ok_status();
}

uint64_t MemoryRegion::remote_first_byte() const {
  // The registration's base is the peer's address of the registration's first byte.
  // (0-based keys are cached only from their exact start.)
  return registration_.base_addr + offset_in_cache_entry();
}

uint64_t MemoryRegion::offset_in_cache_entry() const {
  // A cached registration may begin before this MR (it is shared by every range it contains).
  if (!cache_handle_ || request_.segments.empty()) return 0;
  const auto start = reinterpret_cast<uintptr_t>(request_.segments[0].iov_base);
  return start > cache_handle_.entry->start ? start - cache_handle_.entry->start : 0;
}

Result<PackedRkey> MemoryRegion::packed_rkey() const {
  HMR_RETURN_IF_ERROR(check_registered());
  Result<NicIdentity> nic = nic_identity_of(domain_.nic().capabilities().name);
  if (!nic.ok()) return nic.status();
  PackedRkey packed;
  packed.nic = *nic;
  if (domain_.raw_keys()) packed.flags |= PackedRkey::kRawKey;
  if (domain_.has_mode(HMR_MR_VIRT_ADDR)) packed.flags |= PackedRkey::kVirtAddr;
  packed.iface = static_cast<uint16_t>(request_.memory.iface);
  packed.device = request_.memory.device.value;
  packed.length = request_.length();
  packed.key = registration_.key;
  packed.addr = remote_first_byte();
  return packed;
}

// Runs under this MR's own mutex, which orders the NIC's view of this one MR (enable and
// bind racing on the same MR); nobody else ever waits for that mutex.
// Out of memory is its answer, not an exception: each caller undoes what it did on a failure
// (enable() left the MR reporting enabled, never published; an indirect key its NIC
// registration).
Status MemoryRegion::publish_remote_access() {
  try {
    nic::RemoteAccess access;
    access.enabled = enabled_;
    access.endpoint = endpoint_;
    for (const CounterBinding& binding : counters_) {
      access.counters.push_back({binding.counter->sink(), binding.events});
    }
    return domain_.nic().set_remote_access(registration_, std::move(access));
  } catch (const std::bad_alloc&) {
    return out_of_memory();
  }
}

Status MemoryRegion::bind_endpoint(Endpoint& endpoint, uint64_t flags) {
  if (flags != 0) {
    return make_error(HMR_EBADFLAGS, "binding an endpoint takes flags 0 (got %#llx)",
                      static_cast<unsigned long long>(flags));
  }
  if (&endpoint.domain() != &domain_) {
    return make_error(HMR_EINVAL, "endpoint belongs to another domain");
  }
  if (!domain_.has_mode(HMR_MR_ENDPOINT)) {
    return make_error(HMR_EINVAL, "MRs are bound to endpoints only in HMR_MR_ENDPOINT domains");
  }
  HMR_RETURN_IF_ERROR(check_registered());
  std::lock_guard<std::mutex> lock(mutex_);
  if (endpoint_ != nullptr) return make_error(HMR_EBUSY, "MR is already bound to an endpoint");
  if (enabled_) return make_error(HMR_EBUSY, "MR is enabled; bind before hmr_mr_enable");
  endpoint_ = &endpoint;
  endpoint.bind_mr();
  return ok_status();
}

Status MemoryRegion::bind_counter(Counter& counter, uint64_t flags) {
  constexpr uint64_t kEvents = HMR_REMOTE_WRITE | HMR_REMOTE_READ;
  if (flags == 0 || (flags & ~kEvents) != 0) {
    return make_error(HMR_EBADFLAGS,
                      "bind a counter with HMR_REMOTE_WRITE and/or HMR_REMOTE_READ (got %#llx)",
                      static_cast<unsigned long long>(flags));
  }
  if (&counter.domain() != &domain_) {
    return make_error(HMR_EINVAL, "counter belongs to another domain");
  }
  if (!(request_.flags & HMR_RMA_EVENT)) {
    return make_error(HMR_EINVAL, "MR was not registered with HMR_RMA_EVENT; it cannot count "
                                  "remote events");
  }
  HMR_RETURN_IF_ERROR(check_registered());
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_ && domain_.has_mode(HMR_MR_RMA_EVENT)) {
    return make_error(HMR_EBUSY, "MR is enabled; bind counters before hmr_mr_enable");
  }
  bool merged = false;
  for (CounterBinding& binding : counters_) {
    if (binding.counter == &counter) {
      binding.events |= flags;
      merged = true;
    }
  }
  if (!merged) {
    counters_.push_back({&counter, flags});
    counter.bind_mr();
  }
  return enabled_ ? publish_remote_access() : ok_status();
}

Status MemoryRegion::enable() {
  HMR_RETURN_IF_ERROR(check_registered());
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) return ok_status();
  if (domain_.has_mode(HMR_MR_ENDPOINT) && endpoint_ == nullptr) {
    return make_error(HMR_EINVAL, "bind the MR to an endpoint before enabling it "
                                  "(the domain requires HMR_MR_ENDPOINT)");
  }
  enabled_ = true;
  Status published = publish_remote_access();
  if (!published.ok()) enabled_ = false;
  return published;
}

bool MemoryRegion::contains(uintptr_t start, size_t len) const {
  for (const iovec& segment : request_.segments) {
    const auto first = reinterpret_cast<uintptr_t>(segment.iov_base);
    if (start >= first && len <= segment.iov_len && start - first <= segment.iov_len - len) {
      return true;
    }
  }
  return false;
}

Status MemoryRegion::refresh(const iovec* iov, size_t count) {
  if (iov == nullptr || count == 0) return make_error(HMR_EINVAL, "refresh needs an iov");
  if (request_.dmabuf || indirect()) {
    return make_error(HMR_EINVAL, "a dma-buf MR or an indirect key has no pages of its own to "
                                  "refresh");
  }
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_base == nullptr || iov[i].iov_len == 0 ||
        !contains(reinterpret_cast<uintptr_t>(iov[i].iov_base), iov[i].iov_len)) {
      return make_error(HMR_EINVAL, "refresh segment %zu [%p, +%zu) is not inside the MR", i,
                        iov[i].iov_base, iov[i].iov_len);
    }
  }
  HMR_RETURN_IF_ERROR(check_registered());
  return domain_.nic().refresh(registration_, std::span<const iovec>(iov, count));
}

}  // namespace hmr::core
