#include "core/domain.h"

#include "util/asymmetric_fence.h"

#include <cstring>
#include <string>
#include <system_error>

#include "core/async_registrar.h"
#include "core/event_queue.h"
#include "core/memory_region.h"
#include "core/mr_mode.h"
#include "monitor/device_monitor.h"
#include "monitor/monitor_registry.h"
#include "registration/export_holders.h"
#include "registration/memory_resolution.h"
#include "util/enum_bits.h"
#include "util/log.h"

namespace hmr::core {
namespace {

// An application may ask for less than the NIC offers (0 = all of it), never more.
Result<size_t> narrow_limit(const char* name, size_t requested, size_t nic_limit) {
  if (requested == 0) return nic_limit;
  if (nic_limit != 0 && requested > nic_limit) {
    return make_error(HMR_EINVAL, "%s %zu exceeds the NIC's %zu", name, requested, nic_limit);
  }
  return requested;
}

Result<hmr_threading> negotiate_threading(const hmr_threading& requested) {
  const int value = enum_bits(requested);
  if (value < HMR_THREAD_UNSPEC || value > HMR_THREAD_ENDPOINT) {
    return make_error(HMR_EINVAL, "threading %d is not an hmr_threading value", value);
  }
  // Every model is served by thread-safe code; report what the application asked for.
  return value == HMR_THREAD_UNSPEC ? HMR_THREAD_SAFE : static_cast<hmr_threading>(value);
}

}  // namespace

Result<std::unique_ptr<Domain>> Domain::open(const hmr_domain_attr& attr,
                                             hmr_domain_attr* negotiated) {
  if (attr.flags & ~HMR_DOMAIN_ALLOW_HMEM_COPY) {
    return make_error(HMR_EBADFLAGS, "unknown hmr_domain_attr.flags %#llx",
                      static_cast<unsigned long long>(attr.flags & ~HMR_DOMAIN_ALLOW_HMEM_COPY));
  }
  Result<Environment> environment = read_environment();
  if (!environment.ok()) return environment.status();
  // The memory runtimes load here, once per process, so no registration pays for it; a bad
  // FI_HMEM fails the open.
  HMR_RETURN_IF_ERROR(hmem::Registry::global().load());
  Result<std::unique_ptr<nic::Nic>> nic =
      nic::open_nic(attr.nic, attr.nic_options, attr.nic_handle);
  if (!nic.ok()) return nic.status();
  const nic::Capabilities& caps = (*nic)->capabilities();

  Result<uint64_t> mode =
      negotiate_mr_mode(attr.mr_mode, caps.required_mr_mode, caps.optional_mr_mode);
  if (!mode.ok()) return mode.status();
  const bool raw = (*mode & HMR_MR_RAW) != 0;
  Result<size_t> key_size = narrow_limit("mr_key_size", attr.mr_key_size, caps.key_size);
  if (!key_size.ok()) return key_size.status();
  if (raw && *key_size != caps.key_size) {
    return make_error(HMR_EINVAL, "mr_key_size %zu: RAW keys of this NIC are %zu bytes",
                      *key_size, caps.key_size);
  }
  // A narrower key size bounds the keys the application requests.  Keys chosen for it (by the
  // NIC, or by hmr under PROV_KEY) would not keep to it: key 70000 needs 3 bytes, and peers
  // would be sent keys wider than the domain says (a review found packed keys and
  // hmr_rkey_unpack failing on a 2-byte domain's own keys).
  if (*key_size < caps.key_size && (*mode & HMR_MR_PROV_KEY)) {
    return make_error(HMR_EINVAL, "mr_key_size %zu: under HMR_MR_PROV_KEY keys are chosen for you, "
                      "%zu bytes on this NIC; a narrower size is for keys you request (a "
                      "domain without HMR_MR_PROV_KEY)", *key_size, caps.key_size);
  }
  Result<size_t> iov_limit = narrow_limit("mr_iov_limit", attr.mr_iov_limit, caps.iov_limit);
  if (!iov_limit.ok()) return iov_limit.status();
  Result<size_t> mr_cnt = narrow_limit("mr_cnt", attr.mr_cnt, caps.mr_cnt);
  if (!mr_cnt.ok()) return mr_cnt.status();
  Result<hmr_threading> threading = negotiate_threading(attr.threading);
  if (!threading.ok()) return threading.status();

  DomainRules rules;
  rules.mr_mode = *mode;
  rules.key_size = *key_size;
  rules.iov_limit = *iov_limit;
  rules.max_mr_size = caps.max_mr_size;
  rules.nic_auth_keys = caps.auth_keys;
  std::unique_ptr<Domain> domain(new Domain(std::move(*nic), rules, *environment));
  domain->mr_cnt_ = *mr_cnt;
  domain->nic_registrar_.set_registration_limit(*mr_cnt);
  domain->pinned_limit_ = pinned_limit_for(caps);
  domain->nic_registrar_.set_pinned_limit(domain->pinned_limit_);
  domain->mr_credits_.reset(*mr_cnt);
  domain->copies_allowed_ = (attr.flags & HMR_DOMAIN_ALLOW_HMEM_COPY) != 0;
  // HMEM is emulated (cleared from the mode in force), but an application that supports it
  // has promised to say iface/device itself: hmr verifies them instead of detecting.
  domain->declares_memory_ = (attr.mr_mode & HMR_MR_HMEM) != 0;

  *negotiated = attr;
  negotiated->mr_mode = *mode;
  negotiated->mr_key_size = *key_size;
  negotiated->mr_iov_limit = *iov_limit;
  negotiated->mr_cnt = *mr_cnt;
  negotiated->threading = *threading;
  negotiated->flags = attr.flags;
  // An adapter that opened its own NIC object shows it, so the application can use it too.
  if (void* handle = domain->nic().native_handle()) negotiated->nic_handle = handle;
  HMR_RETURN_IF_ERROR(domain->open_cache(attr, negotiated));
  domain->enable_hit_path();
  return domain;
}

Status Domain::open_cache(const hmr_domain_attr& attr, hmr_domain_attr* negotiated) {
  CacheLimits limits;
  limits.max_count = attr.cache_max_count != 0 ? attr.cache_max_count : environment_.cache_max_count;
  limits.max_bytes = attr.cache_max_size != 0 ? attr.cache_max_size : environment_.cache_max_size;
  const char* name = attr.cache_monitor != nullptr ? attr.cache_monitor : environment_.cache_monitor;
  negotiated->cache_max_count = 0;
  negotiated->cache_max_size = 0;
  negotiated->cache_monitor = "disabled";
  if (std::strcmp(name, "disabled") == 0 || limits.max_count == 0 || limits.max_bytes == 0) {
    return ok_status();
  }
  HMR_RETURN_IF_ERROR(open_device_cache(limits));

  if (std::strcmp(name, kDefaultMonitorName) != 0) {
    // Asked for by name: a monitor that cannot start fails the open, saying why, and where
    // the name came from (a variable set long ago is easy to forget).
    Status opened = open_host_cache(name, limits);
    if (!opened.ok()) {
      return Status(opened.code(), (attr.cache_monitor != nullptr
                                        ? std::string("hmr_domain_attr.cache_monitor '")
                                        : std::string("FI_MR_CACHE_MONITOR='")) +
                                       name + "': " + opened.reason());
    }
  } else {
    std::string reasons;
    for (const char* candidate : kDefaultMonitorOrder) {
      Status opened = open_host_cache(candidate, limits);
      if (opened.ok()) break;
      reasons += std::string(reasons.empty() ? "" : "; ") + candidate + ": " + opened.reason();
    }
    if (cache_ == nullptr) {
      log_message(LogLevel::warn, "registration cache disabled, no host monitor starts here (%s)",
                  reasons.c_str());
      return ok_status();
    }
  }
  negotiated->cache_max_count = limits.max_count;
  negotiated->cache_max_size = limits.max_bytes;
  negotiated->cache_monitor = monitor_->name();
  return ok_status();
}

std::unique_ptr<RegistrationCache> Domain::new_cache(CacheBackend& backend,
                                                     const CacheLimits& limits,
                                                     Monitor* monitor) const {
  auto cache = std::make_unique<RegistrationCache>(backend, limits, monitor);
  if (nic_->capabilities().serialized_by_application) cache->deregister_in_application_calls_only();
  return cache;
}

Status Domain::open_host_cache(const char* monitor_name, const CacheLimits& limits) {
  Result<Monitor*> monitor = acquire_monitor(monitor_name);
  if (!monitor.ok()) return monitor.status();
  std::unique_ptr<RegistrationCache> cache = new_cache(nic_registrar_, limits, *monitor);
  Status attached = cache->attach();
  if (attached.ok()) {
    // Explicit invalidation (hmr_mem_invalidate with no domain) reaches host entries too.
    attached = DeviceMonitor::instance().add_sink(cache.get());
  }
  if (!attached.ok()) {
    cache.reset();
    release_monitor(*monitor);
    return attached;
  }
  monitor_ = *monitor;
  cache_ = std::move(cache);
  return ok_status();
}

Status Domain::open_device_cache(const CacheLimits& limits) {
  std::unique_ptr<RegistrationCache> cache =
      new_cache(device_backend_, limits, &DeviceMonitor::instance());
  HMR_RETURN_IF_ERROR(cache->attach());
  device_cache_ = std::move(cache);
  // Its idle registrations may keep exports another domain needs room for (their fds).
  if (!nic_->capabilities().serialized_by_application) {
    ExportHolders::instance().add(pressure_relief_);
    listed_as_export_holder_ = true;
  }
  return ok_status();
}

// Every export path is cached, a host shadow too: one shadow per device range, shared by every
// MR inside it (hmr_mr_sync of any of them copies its part), freed with the entry.
// hmem_data and page_size ask the NIC for something particular (libfabric's fi_mr_attr
// members of 1.19 and 1.22); a cache entry's registration is made without them, so such a
// request is never shared (the hit path turns it away too: api/api_mr.cpp).
static bool asks_for_particulars(const MrRequest& request) {
  return request.hmem_data != nullptr || request.page_size != 0;
}

bool Domain::device_cacheable(const MrRequest& request) const {
  if (device_cache_ == nullptr) return false;
  if (!has_mode(HMR_MR_PROV_KEY) || has_mode(HMR_MR_ENDPOINT) || request.dmabuf ||
      request.length() == 0 || (request.flags & ~(HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC)) != 0 ||
      (request.access & ~kCacheableAccess) != 0 || asks_for_particulars(request)) {
    return false;
  }
  const int iface = request.memory.iface;
  if (!environment_.device_cache[static_cast<size_t>(iface)]) return false;  // FI_MR_*_CACHE_...
  return allocation_told_apart(request);
}

bool Domain::allocation_told_apart(const MrRequest& request) const {
  if (request.free_unheard) return false;
  Result<hmem::Iface*> runtime = hmem::Registry::global().loaded_iface(request.memory.iface);
  // A runtime that reports frees in none of the three ways: nothing tells its allocations apart.
  if (!runtime.ok()) return false;
  const hmem::Iface::FreeTracking tracking = (*runtime)->free_tracking();
  if (tracking == hmem::Iface::FreeTracking::none) return false;
  // Memory told apart by its allocation id alone, with none given (0: a driver that left
  // CU_POINTER_ATTRIBUTE_BUFFER_ID unset), names the next allocation at the address too.
  // Unless the application reports its frees.
  return !(tracking == hmem::Iface::FreeTracking::alloc_id && request.memory.alloc_id == 0 &&
           request.memory.pieces.empty() && !frees_reported_by_application(request.memory.iface));
}

CacheKey Domain::device_cache_key(const MrRequest& request, ExportMode mode) const {
  CacheKey key = cache_key(request);
  key.alloc_id = request.memory.alloc_id;
  key.export_mode = static_cast<uint8_t>(mode);
  return key;
}

ExportPlan Domain::plan_export(const hmem::PointerInfo& memory, ExportInputs& inputs) const {
  inputs.memory = &memory;
  inputs.nic = &nic_->capabilities();
  inputs.environment = &environment_;
  inputs.copies_allowed = copies_allowed_;
  return core::plan_export(inputs);
}

nic::Support Domain::operation_support(hmr_md_op op) const {
  const nic::MemoryOperations& ops = nic_->capabilities().operations;
  switch (op) {
    case HMR_MD_OP_REREG: return ops.rereg;
    case HMR_MD_OP_MEMORY_WINDOWS:
      if (ops.memory_windows.available && raw_keys()) {
        return {false, "memory windows give 64-bit keys; this domain's keys are raw (HMR_MR_RAW)"};
      }
      if (ops.memory_windows.available && rules_.key_size < nic_->capabilities().key_size) {
        return {false, "a window's key is the NIC's choice, " +
                           std::to_string(nic_->capabilities().key_size) +
                           " bytes, and this domain's mr_key_size is " +
                           std::to_string(rules_.key_size)};
      }
      return ops.memory_windows;
    case HMR_MD_OP_ODP: return ops.odp;
    case HMR_MD_OP_IMPLICIT_ODP:
      if (ops.implicit_odp.available && !has_mode(HMR_MR_VIRT_ADDR)) {
        return {false, "implicit ODP is addressed by virtual address; this domain has no "
                       "HMR_MR_VIRT_ADDR"};
      }
      return ops.implicit_odp;
    case HMR_MD_OP_ADVISE: return ops.advise;
    case HMR_MD_OP_INDIRECT: return ops.indirect;
  }
  return {false, "unknown operation"};
}

Status Domain::check_paging(const MrRequest& request) const {
  if (!request.on_demand_paging()) return ok_status();
  const nic::Support needed =
      operation_support(request.implicit_odp() ? HMR_MD_OP_IMPLICIT_ODP : HMR_MD_OP_ODP);
  if (!needed.available) return make_error(HMR_ENOSYS, "%s", needed.reason.c_str());
  return ok_status();
}

Status Domain::resolve(MrRequest& request) {
  hmem::Registry& registry = hmem::Registry::global();
  HMR_RETURN_IF_ERROR(resolve_memory(request, declares_memory_, registry));
  if (request.device_memory() && !request.dmabuf) {
    Result<hmem::Iface*> iface = registry.loaded_iface(request.memory.iface);
    if (iface.ok()) {
      DeviceMonitor& monitor = DeviceMonitor::instance();
      monitor.observe(**iface, request.memory);
      // Before the free watch is set: a free reported from here on (ROCr's callback may fire
      // the moment it is set) keeps the registration out of the cache, or the next
      // allocation at the address would be served it.
      if (device_cache_) request.device_cache_sequence = device_cache_->invalidation_sequence();
      request.free_unheard = !monitor.watch(**iface, request.memory);
    }
  }
  return ok_status();
}

void Domain::invalidate(uintptr_t start, uintptr_t end) {
  // The memory may have been freed, and other domains' caches still hold it: their threads'
  // hints (core/recent_device_ranges.h) are not trusted any more, so their next hit asks the
  // runtime who is at the address.  (A free reported to one domain only served another
  // domain the freed allocation's registration, under HMR_CUDA_FREES_REPORTED.)
  DeviceMonitor::instance().distrust_hints();
  DmabufShares::instance().forget_range(start, end);
  if (cache_) cache_->invalidate(start, end);
  if (device_cache_) device_cache_->invalidate(start, end);
}

bool Domain::cacheable(const MrRequest& request) const {
  // Sharing must not change what a peer sees: its own key (requested keys), its own
  // counters or endpoint, or a dma-buf the caller owns would.
  // Any registration flag (RMA_EVENT, RMA_PMEM, ODP, ...) asks the NIC for something
  // particular, so only plain registrations share; so does HMR_MW_BIND (windows pin an MR).
  return cache_ != nullptr && has_mode(HMR_MR_PROV_KEY) && !has_mode(HMR_MR_ENDPOINT) &&
         request.segments.size() == 1 && request.segments[0].iov_len != 0 && request.flags == 0 &&
         request.iface == HMR_HMEM_SYSTEM &&
         (request.access & ~kCacheableAccess) == 0 && !asks_for_particulars(request);
}

// CacheKey keeps access in 16 bits; only cacheable requests get a key.
static_assert(kCacheableAccess <= UINT16_MAX);

CacheKey Domain::cache_key(const MrRequest& request) const {
  CacheKey key;
  key.access = static_cast<uint16_t>(request.access);
  key.iface = static_cast<uint8_t>(request.iface);
  key.device = static_cast<int32_t>(request.device);
  // 0-based addressing: byte 0 is the registration's first, so only an MR that starts there
  // may share it, unless the caller addresses the MR from the base hmr reports.
  key.exact_start = !has_mode(HMR_MR_VIRT_ADDR) && !request.reported_base;
  return key;
}

hmr_domain_stats Domain::statistics() {
  // Cache first: it finishes deferred deregistrations, which the NIC counters then include.
  CacheStatistics cache = cache_ ? cache_->statistics() : CacheStatistics{};
  if (device_cache_) {
    const CacheStatistics device = device_cache_->statistics();
    cache.hits += device.hits;
    cache.misses += device.misses;
    cache.invalidations += device.invalidations;
    cache.evictions += device.evictions;
    cache.pressure_evictions += device.pressure_evictions;
    cache.uncached += device.uncached;
    cache.cached_regions += device.cached_regions;
    cache.cached_bytes += device.cached_bytes;
    cache.in_use_regions += device.in_use_regions;
  }
  hmr_domain_stats stats = stats_.snapshot();
  stats.registrations += static_cast<uint64_t>(hit_counters_.sum(kHitRegistrations));
  stats.mr_open += static_cast<uint64_t>(hit_counters_.sum(kHitOpen));
  stats.mr_bytes += static_cast<uint64_t>(hit_counters_.sum(kHitBytes));
  const NicCounters nic = nic_registrar_.counters();
  stats.nic_registrations = nic.registrations;
  stats.nic_deregistrations = nic.deregistrations;
  stats.registration_ns = nic.registration_ns;
  stats.deregistration_ns = nic.deregistration_ns;
  stats.nic_refusal_retries = nic.refusal_retries;
  stats.nic_refusals = nic.refusals;
  stats.nic_registrations_held = nic.held;
  stats.nic_pinned_bytes = nic.pinned_bytes;
  if (cache_ || device_cache_) {
    stats.cache_hits = cache.hits;
    stats.cache_misses = cache.misses;
    stats.cache_invalidations = cache.invalidations;
    stats.cache_evictions = cache.evictions;
    stats.cache_pressure_evictions = cache.pressure_evictions;
    stats.cache_uncached = cache.uncached;
    stats.cache_regions = cache.cached_regions;
    stats.cache_bytes = cache.cached_bytes;
    stats.cache_in_use = cache.in_use_regions;
  }
  return stats;
}

void Domain::flush_cache() {
  if (cache_) cache_->flush();
  if (device_cache_) device_cache_->flush();
}

namespace {
NicRules nic_rules(const DomainRules& rules, const Environment& environment) {
  NicRules nic;
  nic.virt_addr = (rules.mr_mode & HMR_MR_VIRT_ADDR) != 0;
  nic.track_page_changes = (rules.mr_mode & HMR_MR_MMU_NOTIFY) != 0;
  nic.check_allocated = (rules.mr_mode & HMR_MR_ALLOCATED) != 0;
  nic.prefault = {environment.reg_prefault_min, environment.reg_threads};
  nic.reg_threads = environment.reg_threads;
  nic.key_size = (rules.mr_mode & HMR_MR_RAW) ? 0 : rules.key_size;
  return nic;
}
}  // namespace

Domain::Domain(std::unique_ptr<nic::Nic> nic, const DomainRules& rules,
               const Environment& environment)
    : nic_(std::move(nic)),
      rules_(rules),
      environment_(environment),
      nic_registrar_(*nic_, nic_rules(rules, environment)) {
  nic_registrar_.set_pressure_relief(&pressure_relief_);
}

size_t Domain::CachePressureRelief::release_unused(size_t count, Shortage shortage) {
  // Registrations of memory already freed first, in both caches: they help nobody, and a
  // device cache's dead entries (an allocation freed, seen by its monitor) kept their keys,
  // exports and shadows while the host cache gave back entries still wanted.  Counted for any
  // shortage (what a dead entry pins, if anything, is not known here; a wrong count only
  // costs a retry).  Then the host cache (its entries are the cheapest to make again, and
  // each pins host pages on a NIC that pins), then the device cache's exports and shadows:
  // past the pinned bound only those that pin host pages (a dma-buf registration given back
  // for it made room for nothing, and its next user paid a new export and registration).
  size_t released = domain_.cache_ ? domain_.cache_->release_dead() : 0;
  if (domain_.device_cache_) released += domain_.device_cache_->release_dead();
  if (released >= count) return released;
  if (domain_.cache_) released += domain_.cache_->release_unused(count - released);
  if (released >= count || !domain_.device_cache_) return released;
  if (shortage == Shortage::any) {
    return released + domain_.device_cache_->release_unused(count - released);
  }
  DeviceCacheBackend& backend = domain_.device_backend_;
  const RegistrationCache::VictimFilter pins = [&backend](const CacheEntry& entry) {
    return backend.pins_host_memory(entry.registration());
  };
  return released + domain_.device_cache_->release_unused(count - released, &pins,
                                                         /*then_wait_for_others=*/true);
}

size_t Domain::CachePressureRelief::release_unused_exports(size_t count, ExportRelief which) {
  // Only device registrations hold exports; the host cache's entries would go for nothing.
  if (!domain_.device_cache_) return 0;
  DeviceCacheBackend& backend = domain_.device_backend_;
  const RegistrationCache::VictimFilter wanted = [&backend, which](const CacheEntry& entry) {
    // (The key says the export mode without a lock; only dma-buf entries hold an export.)
    if (static_cast<ExportMode>(entry.key.export_mode) != ExportMode::dmabuf) return false;
    const DeviceCacheBackend::ExportHolding holding = backend.export_holding(entry.registration());
    return which == ExportRelief::sole_holders
               ? holding == DeviceCacheBackend::ExportHolding::sole
               : holding != DeviceCacheBackend::ExportHolding::none;
  };
  // (The last pass also waits for what other threads let go: an entry evicted or closed
  // under this one may be on its way out with the export it holds, which nothing else would
  // count: DeviceDescriptorPressure.ThreadsAtTheLimitAllRegister under TSan.)
  return domain_.device_cache_->release_unused(count, &wanted,
                                               which == ExportRelief::any_holders);
}

Domain::~Domain() { release_caches(); }

void Domain::release_caches() {
  // First: another domain's registration may be giving back this one's idle registrations,
  // retired here and deregistered on that thread after this cache's lock; remove() waits for
  // that call to end.  (Before, the NIC was closed under that deregistration: ofi's fi_close
  // of the domain met the MR.)
  if (listed_as_export_holder_) {
    ExportHolders::instance().remove(pressure_relief_);
    listed_as_export_holder_ = false;
  }
  nic_registrar_.set_pressure_relief(nullptr);  // the caches go first
  if (cache_) DeviceMonitor::instance().remove_sink(cache_.get());
  device_cache_.reset();
  cache_.reset();  // deregisters what it holds, leaves the monitor and the reaper
  if (monitor_ != nullptr) {
    release_monitor(monitor_);
    monitor_ = nullptr;
  }
}

Status Domain::prepare_close() {
  // From inside the NIC's deregistration of one of this domain's registrations (a callback
  // NIC's dereg, on the application's thread or hmr's reaper): the cache would be freed under
  // the deregistration that is running (found by a review: a crash, or the reaper waiting for
  // itself for ever).
  if ((cache_ && cache_->deregistering_on_this_thread()) ||
      (device_cache_ && device_cache_->deregistering_on_this_thread())) {
    return make_error(HMR_EBUSY, "hmr_domain_close from inside the domain's own NIC "
                      "deregistration (a dereg callback): close it after the callback returns");
  }
  const int64_t open_mrs = open_mr_count();
  if (open_mrs != 0 || open_objects_.load() != 0) {
    return make_error(HMR_EBUSY, "domain has %lld MRs and %d counters/endpoints/rkeys/windows "
                      "open; close them first", static_cast<long long>(open_mrs),
                      open_objects_.load());
  }
  std::lock_guard<std::mutex> lock(bind_mutex_);
  registrar_.reset();
  if (event_queue_ != nullptr) event_queue_->unbind_domain();
  event_queue_ = nullptr;
  return ok_status();
}

Status Domain::close_nic() {
  // Nothing of ours may be left registered on what the NIC closes, nor deregistered after it:
  // the caches go whole, not only flushed (what a flush could not finalize, and the reaper or
  // a monitor's notification still reaching a cache, deregistered on a closed verbs context:
  // found by a review).
  release_caches();
  return nic_->close_native();
}

Status Domain::bind_event_queue(EventQueue& queue, uint64_t flags) {
  if (flags != HMR_REG_MR) {
    return make_error(HMR_EBADFLAGS, "bind an event queue with HMR_REG_MR (got %#llx)",
                      static_cast<unsigned long long>(flags));
  }
  if (nic_->capabilities().serialized_by_application) {
    return make_error(HMR_EOPNOTSUPP, "%s is serialized by the application (threading=domain): "
                      "asynchronous registration would call it from hmr's own thread",
                      nic_->capabilities().name.c_str());
  }
  std::lock_guard<std::mutex> lock(bind_mutex_);
  if (event_queue_ != nullptr) return make_error(HMR_EBUSY, "domain is already bound to an event queue");
  // The worker first: a failure to start it (out of memory; no thread, std::system_error)
  // leaves the domain as it was.  (It was made after the flag below, which then stayed set:
  // no event queue bound, and every registration off the hit path for good.)
  std::unique_ptr<AsyncRegistrar> registrar;
  try {
    registrar = std::make_unique<AsyncRegistrar>();
  } catch (const std::system_error& error) {
    return make_error(HMR_EAGAIN, "cannot start the asynchronous registration thread: %s",
                      error.what());
  }
  // From now on every MR is asynchronous.  The hit path and its misses count an MR open with
  // plain stores and a light fence before they read this flag (Domain::open_shared); after
  // the heavy fence we see their counts, or they see the flag and take the path below.
  async_bound_.store(true, std::memory_order_seq_cst);
  heavy_fence();
  if (open_mr_count() != 0) {
    async_bound_.store(false, std::memory_order_release);
    return make_error(HMR_EBUSY, "bind the event queue before registering memory");
  }
  registrar_ = std::move(registrar);
  event_queue_ = &queue;
  queue.bind_domain();
  return ok_status();
}

Status Domain::mr_cnt_reached() const {
  return make_error(HMR_ENOSPC, "domain already has mr_cnt=%zu MRs open", mr_cnt_);
}

Status Domain::reserve_mr_slot() {
  if (!mr_credits_.take()) return mr_cnt_reached();
  open_mrs_.fetch_add(1);
  return ok_status();
}

void Domain::release_mr_slot() {
  open_mrs_.fetch_sub(1);
  mr_credits_.give();
}

Domain::MrSlotReservation::~MrSlotReservation() {
  if (handed_out_) return;
  if (holds_key_) domain_.requested_keys_.release(key_);
  domain_.release_mr_slot();
}

Result<Domain::Registered> Domain::register_memory(const hmr_mr_attr& attr, uint64_t flags,
                                                   RegistrationCache::Probe probed,
                                                   hmr_mr** out) {
  RegistrationFailureTally tally(stats_);
  Result<MrRequest> request = validate_mr_request(attr, flags, rules_);
  Status status = request.ok() ? check_paging(*request) : request.status();
  if (status.ok()) status = resolve(*request);
  if (status.ok() && shared_like_a_hit(*request)) {
    if (std::optional<Result<Registered>> shared = register_shared(*request, probed)) {
      if (shared->ok()) tally.settle();
      return std::move(*shared);
    }  // else an event queue was bound meanwhile: the MR below is asynchronous
  }
  if (status.ok()) status = reserve_mr_slot();
  if (!status.ok()) return status;
  MrSlotReservation reservation(*this);
  if (request->requested_key) {
    HMR_RETURN_IF_ERROR(requested_keys_.reserve(*request->requested_key));
    reservation.hold_key(*request->requested_key);
  }
  const uint64_t length = request->counted_bytes();
  auto region = std::make_unique<MemoryRegion>(*this, std::move(*request));
  {
    std::lock_guard<std::mutex> lock(bind_mutex_);
    if (registrar_) {
      HMR_RETURN_IF_ERROR(region->keep_caller_dmabuf());
      region->mark_submitted(EventQueue::reserve());
      AsyncRegistrar::Ticket room = AsyncRegistrar::reserve();
      // Nothing below fails.  Everything the call hands out is out before the submission:
      // the worker may complete it, and another thread read its event and close it, at once.
      reservation.handed_out();
      tally.settle();  // (its completion counts it)
      stats_.record_mr_open(length);
      MemoryRegion* submitted = region.release();
      *out = to_handle<hmr_mr>(submitted);
      registrar_->submit(std::move(room), submitted);
      return Registered{submitted, nullptr, /*written=*/true};
    }
  }
  HMR_RETURN_IF_ERROR(region->register_now());
  reservation.handed_out();
  tally.settle();
  stats_.record_registration(true);
  stats_.record_mr_open(length);
  return Registered{region.release(), nullptr};
}

Result<uint64_t> Domain::map_peer_key(const KeyBytes& key) {
  if (key.size != rules_.key_size) {
    return make_error(HMR_EINVAL, "raw key of %zu bytes; this domain's keys are %zu", key.size,
                      rules_.key_size);
  }
  return raw_keys() ? mapped_keys_.map(key) : key.low_u64();
}

Status Domain::unmap_peer_key(uint64_t key) {
  if (!raw_keys()) return ok_status();  // nothing was mapped outside RAW domains
  return mapped_keys_.unmap(key);
}

Status Domain::close_memory_region(MemoryRegion* region) {
  HMR_RETURN_IF_ERROR(region->check_unused());  // windows or indirect keys still use it
  if (region->submitted()) region->settle_async_registration();
  Status deregistered = region->release();
  if (region->request().requested_key) requested_keys_.release(*region->request().requested_key);
  stats_.record_mr_close(region->request().counted_bytes());
  release_mr_slot();
  delete region;
  return closed_anyway(std::move(deregistered));  // the caller learns the NIC failed
}

Status closed_anyway(Status failure) {
  // Not as -HMR_EBUSY (a dereg callback or verbs may answer that): from a close it says that
  // nothing was closed (hmr.h), and a caller would close the freed handle again.
  if (failure.code() == HMR_EBUSY) {
    return make_error(HMR_EIO, "the MR is closed, but %s", failure.reason().c_str());
  }
  return failure;
}

}  // namespace hmr::core
