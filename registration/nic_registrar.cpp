#include "registration/nic_registrar.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "util/log.h"
#include "util/stopwatch.h"

namespace hmr::core {

nic::RegistrationRequest NicRegistrar::request_for(std::span<const iovec> segments,
                                                   uint64_t access) const {
  nic::RegistrationRequest request;
  request.segments = segments;
  request.access = access;
  request.virt_addr = rules_.virt_addr;
  request.track_page_changes = rules_.track_page_changes;
  return request;
}

namespace {

// Registrations given back per refusal: a few at a time, least recently used first (as
// libfabric's cache flushes its LRU entry and retries), so a NIC that is full by a little
// does not lose the whole cache, and one that is full by much is not retried once per entry.
constexpr size_t kReleasedPerRefusal = 8;

}  // namespace

bool NicRegistrar::reserve(size_t* released) {
  for (;;) {
    uint64_t now = held_.load(std::memory_order_relaxed);
    if (limit_ == 0 || now < limit_) {
      if (held_.compare_exchange_weak(now, now + 1, std::memory_order_relaxed)) return true;
      continue;
    }
    // At the limit: what is idle goes back (its deregistration lowers held_) before the NIC
    // is asked for more than it said it holds.
    const size_t given = relief_ != nullptr ? relief_->release_unused(kReleasedPerRefusal) : 0;
    if (given == 0) return false;
    *released += given;
  }
}

Status NicRegistrar::refusal(const Status& cause, size_t released) {
  refusals_.fetch_add(1, std::memory_order_relaxed);
  return make_error(cause.code(),
                    "%s; hmr holds %llu registrations at this NIC, every one of them in use by "
                    "an open MR (%zu unused ones were given back for this request and none is "
                    "left): close MRs, or raise the NIC's limit",
                    cause.reason().c_str(),
                    static_cast<unsigned long long>(held_.load(std::memory_order_relaxed)), released);
}

template <typename RegisterCall>
Result<nic::Registration> NicRegistrar::under_pressure(RegisterCall&& register_call) {
  size_t released = 0;
  for (;;) {
    if (!reserve(&released)) {
      return refusal(make_error(HMR_ENOSPC, "the NIC '%s' holds at most %zu registrations "
                                "(mr_cnt)", nic_.capabilities().name.c_str(), limit_),
                     released);
    }
    const Stopwatch stopwatch;
    Result<nic::Registration> registered = [&] {
      try {
        return register_call();
      } catch (...) {  // (out of memory in an adapter): the reservation goes with it
        held_.fetch_sub(1, std::memory_order_relaxed);
        throw;
      }
    }();
    if (registered.ok()) {
      registrations_.fetch_add(1, std::memory_order_relaxed);
      registration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
      return registered;
    }
    held_.fetch_sub(1, std::memory_order_relaxed);
    const Status& cause = registered.status();
    if (!is_resource_refusal(cause.code()) || relief_ == nullptr) return registered;
    const size_t given = relief_->release_unused(kReleasedPerRefusal);
    if (given == 0) return refusal(cause, released);
    released += given;
    refusal_retries_.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<nic::Registration> NicRegistrar::register_memory(const nic::RegistrationRequest& request) {
  // Device addresses are not the CPU's to probe: the ALLOCATED check is for host memory.  An
  // ODP registration is the one a NIC makes over pages that need not exist yet.
  if (!(request.flags & HMR_HMEM_DEVICE_ONLY) && !request.on_demand_paging) {
    HMR_RETURN_IF_ERROR(check_allocated(request.segments));
  }
  // Large host ranges are populated first, in parallel (registration/prefault.h decides which).
  prefault_for_registration(request, rules_.prefault,
                            nic_.capabilities().on_demand_paging || request.on_demand_paging);
  nic::RegistrationRequest parallel = request;
  parallel.parallelism = rules_.reg_threads;
  return under_pressure([&] { return nic_.register_memory(parallel); });
}

Result<nic::Registration> NicRegistrar::register_indirect(
    std::span<const nic::IndirectSegment> segments, uint64_t access) {
  return under_pressure([&] { return nic_.register_indirect(segments, access); });
}

Status NicRegistrar::deregister_memory(nic::Registration& registration) {
  const Stopwatch stopwatch;
  Status status = nic_.deregister(registration);
  held_.fetch_sub(1, std::memory_order_relaxed);  // dropped either way (see the header)
  if (status.ok()) {
    deregistrations_.fetch_add(1, std::memory_order_relaxed);
    deregistration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
  } else {
    log_message(LogLevel::warn, "NIC deregistration failed, registration dropped: %s",
                status.reason().c_str());
  }
  return status;
}

Result<nic::Registration> NicRegistrar::register_range(uintptr_t start, uint64_t len,
                                                       const CacheKey& key) {
  const iovec segment = {reinterpret_cast<void*>(start), len};
  nic::RegistrationRequest request = request_for({&segment, 1}, key.access);
  request.iface = static_cast<hmr_hmem_iface>(key.iface);
  request.device = static_cast<uint64_t>(key.device);
  return register_memory(request);
}

NicCounters NicRegistrar::counters() const {
  NicCounters counters;
  counters.registrations = registrations_.load(std::memory_order_relaxed);
  counters.deregistrations = deregistrations_.load(std::memory_order_relaxed);
  counters.registration_ns = registration_ns_.load(std::memory_order_relaxed);
  counters.deregistration_ns = deregistration_ns_.load(std::memory_order_relaxed);
  counters.refusal_retries = refusal_retries_.load(std::memory_order_relaxed);
  counters.refusals = refusals_.load(std::memory_order_relaxed);
  return counters;
}

Status NicRegistrar::check_allocated(std::span<const iovec> segments) const {
  if (!rules_.check_allocated) return ok_status();
  for (const iovec& segment : segments) {
    const auto start = reinterpret_cast<uintptr_t>(segment.iov_base);
    const uintptr_t page = start & ~uintptr_t{4095};
    // msync fails with ENOMEM exactly when part of the range is not mapped; it touches nothing.
    if (msync(reinterpret_cast<void*>(page), segment.iov_len + (start - page), MS_ASYNC) != 0) {
      const int err = errno;
      return make_error(HMR_EFAULT,
                        "[%p, +%zu) is not allocated (%s); the domain requires HMR_MR_ALLOCATED",
                        segment.iov_base, segment.iov_len, std::strerror(err));
    }
  }
  return ok_status();
}

}  // namespace hmr::core
