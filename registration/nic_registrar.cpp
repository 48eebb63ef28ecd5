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
  const Stopwatch stopwatch;
  Result<nic::Registration> registered = nic_.register_memory(parallel);
  if (registered.ok()) {
    registrations_.fetch_add(1, std::memory_order_relaxed);
    registration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
  }
  return registered;
}

Result<nic::Registration> NicRegistrar::register_indirect(
    std::span<const nic::IndirectSegment> segments, uint64_t access) {
  const Stopwatch stopwatch;
  Result<nic::Registration> registered = nic_.register_indirect(segments, access);
  if (registered.ok()) {
    registrations_.fetch_add(1, std::memory_order_relaxed);
    registration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
  }
  return registered;
}

Status NicRegistrar::deregister_memory(nic::Registration& registration) {
  const Stopwatch stopwatch;
  Status status = nic_.deregister(registration);
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
