#include "registration/nic_registrar.h"

#include "registration/export_holders.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "hmem/page_range.h"
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

// Adds `amount` to `account` unless that passes `bound` (UINT64_MAX: none); a compare-and-swap, so
// threads reserving at once never pass the bound together, and none fails while room is left.
// Nothing added never fails: an account already past its bound (a re-registration the NIC
// accepted past it, before hmr reserved a growth) refused even what pins nothing.
bool take(std::atomic<uint64_t>& account, uint64_t amount, uint64_t bound) {
  if (amount == 0) return true;
  uint64_t now = account.load(std::memory_order_relaxed);
  do {
    if (now + amount > bound || now + amount < now) return false;
  } while (!account.compare_exchange_weak(now, now + amount, std::memory_order_relaxed));
  return true;
}

// A failure leaving the registrar: a refusal for resources is marked as the NIC's
// (Status::nic_refusal), told apart from a driver's failure with the same code.
Status marked(Status status) {
  if (is_resource_refusal(status.code())) status.mark_nic_refusal();
  return status;
}

}  // namespace

uint64_t NicRegistrar::pinned_bytes_of(const nic::RegistrationRequest& request) const {
  return nic_.capabilities().pins_host_memory ? nic::pinned_bytes_of(request) : 0;
}

Status NicRegistrar::over_pinned_bound(uint64_t pinned, const char* what, const char* advice) {
  if (pinned <= max_pinned_) return ok_status();
  refusals_.fetch_add(1, std::memory_order_relaxed);
  return make_error(HMR_ENOMEM, "the %s would pin %llu bytes, more than the %llu bytes hmr may "
                    "hold pinned at the NIC '%s' (RLIMIT_MEMLOCK or the NIC's bound: "
                    "hmr_md_query max_pinned_bytes; %s)",
                    what, static_cast<unsigned long long>(pinned),
                    static_cast<unsigned long long>(max_pinned_), nic_.capabilities().name.c_str(),
                    advice);
}

Status NicRegistrar::admits_pinned(uint64_t host_bytes, const char* what) {
  if (!nic_.capabilities().pins_host_memory) return ok_status();
  const uint64_t page = hmem::host_page_size();
  const uint64_t pages = host_bytes / page + (host_bytes % page != 0 ? 1 : 0);
  return over_pinned_bound(pages * page, what, "raise ulimit -l");
}

Status NicRegistrar::reserve(uint64_t registrations, uint64_t pinned, GivingBack* giving_back) {
  using ull = unsigned long long;
  // (no eviction can make room for a registration over the bound on its own)
  HMR_RETURN_IF_ERROR(over_pinned_bound(pinned, "registration", "raise ulimit -l"));
  for (;;) {
    const uint64_t lowered = lowered_.load(std::memory_order_acquire);
    const bool counted = take(held_, registrations, limit_ != 0 ? limit_ : UINT64_MAX);
    if (counted && take(pinned_, pinned, max_pinned_)) return ok_status();
    if (counted) held_.fetch_sub(registrations, std::memory_order_relaxed);
    // At a bound: what is idle goes back (its deregistration lowers the accounts) before the
    // NIC is asked for more than it, or the process's limit, allows.  Past the pinned bound
    // only what pins host pages can make room.
    if (give_back(giving_back, lowered_, lowered,
                  counted ? Shortage::pinned_host_memory : Shortage::any)) {
      continue;
    }
    return refusal(counted ? make_error(HMR_ENOMEM, "pinning %llu more bytes would pass the "
                                        "%llu bytes hmr may hold pinned at the NIC '%s' "
                                        "(RLIMIT_MEMLOCK or the NIC's bound)",
                                        static_cast<ull>(pinned), static_cast<ull>(max_pinned_),
                                        nic_.capabilities().name.c_str())
                           : make_error(HMR_ENOSPC, "the NIC '%s' holds at most %zu "
                                        "registrations (mr_cnt)",
                                        nic_.capabilities().name.c_str(), limit_),
                   giving_back->released);
  }
}

void NicRegistrar::unreserve(uint64_t registrations, uint64_t pinned, bool at_nic) {
  held_.fetch_sub(registrations, std::memory_order_relaxed);
  pinned_.fetch_sub(pinned, std::memory_order_relaxed);
  lowered_.fetch_add(1, std::memory_order_release);
  if (at_nic) returned_to_nic_.fetch_add(1, std::memory_order_release);
}

namespace {

// NIC deregistrations this thread is inside (through any domain's door): a callback NIC's
// dereg may call hmr back, and a registration it makes must not wait for other threads'
// giving back, which may wait for this very deregistration to end (its cache's finalizing),
// or run a callback that waits the same way for this thread's.
thread_local unsigned deregistering_here = 0;

}  // namespace

bool NicRegistrar::give_back(GivingBack* progress, const std::atomic<uint64_t>& generation,
                             uint64_t before, Shortage shortage) {
  if (relief_ == nullptr) return false;
  giving_back_.fetch_add(1, std::memory_order_acq_rel);
  struct Uncount {
    std::atomic<uint32_t>* count;
    ~Uncount() { count->fetch_sub(1, std::memory_order_acq_rel); }
  };
  size_t given = 0;
  {
    const Uncount uncount{&giving_back_};
    given = relief_->release_unused(kReleasedPerRefusal, shortage);
  }
  if (given != 0) {
    progress->released += given;
    return true;
  }
  // Nothing idle was left for this thread, but another one may have taken the last idle
  // registrations a moment earlier and be deregistering them now: wait until no thread is
  // giving back, and try again if anything was let go since this thread's attempt began
  // (also what a close made idle and another refused thread deregistered between that
  // attempt and this look).  Otherwise two threads at the bound would fail where one alone
  // succeeds.  Every retry follows a deregistration someone else made, so threads that all
  // meet a full NIC end with its refusal; and one thread deregistering over and over cannot
  // keep a request that does not fit retrying: kRetriesOnOthers.  (Every release_unused
  // call ends, so the wait does; a hit never comes here.)  Not from inside a NIC
  // deregistration (a callback NIC's dereg registering): the giving back it runs inside, or
  // another thread's waiting for it, ends only after it returns, so it takes the NIC's
  // refusal instead (two threads each in such a dereg waited for each other for ever).  Nor
  // when the NIC's dereg runs the application's code (a callback NIC): another thread's
  // giving back may be inside a dereg that waits for a lock this caller holds while it
  // registers, and this wait never ended (a review's finding).  What that thread took out of
  // the cache is in transit, and release_unused above already waited for it as long as the
  // cache waits for such a dereg (RegistrationCache::wait_for_in_transit).
  if (deregistering_here == 0 && !deregistration_may_wait_for_application()) {
    while (giving_back_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
  if (generation.load(std::memory_order_acquire) == before) return false;
  return ++progress->retries_on_others <= kRetriesOnOthers;
}

size_t NicRegistrar::give_back_exports(size_t count) {
  for (const ExportRelief which : {ExportRelief::sole_holders, ExportRelief::any_holders}) {
    size_t given = relief_ != nullptr ? relief_->release_unused_exports(count, which) : 0;
    if (given == 0) given = ExportHolders::instance().release_unused_elsewhere(count, relief_, which);
    if (given != 0) return given;
  }
  return 0;
}

Status NicRegistrar::refusal(const Status& cause, size_t released) {
  refusals_.fetch_add(1, std::memory_order_relaxed);
  return make_error(cause.code(),
                    "%s; hmr holds %llu registrations pinning %llu bytes at this NIC, every "
                    "one of them in use by an open MR (%zu unused ones were given back for this "
                    "request and none is left): close MRs, or raise the NIC's limit",
                    cause.reason().c_str(),
                    static_cast<unsigned long long>(held_.load(std::memory_order_relaxed)),
                    static_cast<unsigned long long>(pinned_.load(std::memory_order_relaxed)),
                    released);
}

template <typename RegisterCall>
Result<nic::Registration> NicRegistrar::under_pressure(uint64_t pinned,
                                                       RegisterCall&& register_call, Tally tally) {
  GivingBack giving_back;
  for (;;) {
    Status reserved = reserve(1, pinned, &giving_back);
    if (!reserved.ok()) return marked(std::move(reserved));
    const uint64_t returned = returned_to_nic_.load(std::memory_order_acquire);
    const Stopwatch stopwatch;
    Result<nic::Registration> registered = [&] {
      try {
        return register_call();
      } catch (...) {  // (out of memory in an adapter): the reservation goes with it
        unreserve(1, pinned, /*at_nic=*/false);
        throw;
      }
    }();
    if (registered.ok()) {
      registered->pinned_bytes = pinned;
      if (tally == Tally::counted) {
        registrations_.fetch_add(1, std::memory_order_relaxed);
        registration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
      }
      return registered;
    }
    unreserve(1, pinned, /*at_nic=*/false);
    const Status& cause = registered.status();
    if (!is_resource_refusal(cause.code()) || relief_ == nullptr) return marked(cause);
    if (!give_back(&giving_back, returned_to_nic_, returned)) {
      return marked(refusal(cause, giving_back.released));
    }
    refusal_retries_.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<nic::Registration> NicRegistrar::register_memory(const nic::RegistrationRequest& request,
                                                        Tally tally) {
  // Device addresses are not the CPU's to probe: the ALLOCATED check is for host memory.  An
  // ODP registration is the one a NIC makes over pages that need not exist yet.
  if (!(request.flags & HMR_HMEM_DEVICE_ONLY) && !request.on_demand_paging) {
    HMR_RETURN_IF_ERROR(check_allocated(request.segments));
  }
  nic::RegistrationRequest parallel = request;
  parallel.parallelism = rules_.reg_threads;
  bool prefaulted = false;
  Result<nic::Registration> registered = under_pressure(
      pinned_bytes_of(request),
      [&] {
        // Large host ranges are populated first, in parallel (registration/prefault.h decides
        // which), once the bounds were reserved: a range refused at once for RLIMIT_MEMLOCK
        // was populated whole first (256 MiB resident for nothing, a review found).
        if (!prefaulted) {
          prefault_for_registration(request, rules_.prefault, nic_.capabilities().pins_host_memory,
                                    nic_.capabilities().on_demand_paging ||
                                        request.on_demand_paging);
          prefaulted = true;
        }
        return nic_.register_memory(parallel);
      },
      tally);
  if (registered.ok()) HMR_RETURN_IF_ERROR(fit_key(*registered, tally));
  return registered;
}

Status NicRegistrar::narrow_key(nic::Registration& registration) const {
  const size_t size = rules_.key_size;
  if (size == 0 || registration.key.size <= size) return ok_status();
  const uint64_t key = registration.key.low_u64();
  if (registration.key.size <= sizeof(uint64_t) && (size >= 8 || (key >> (8 * size)) == 0)) {
    registration.key = KeyBytes::from_u64(key, size);
    return ok_status();
  }
  return make_error(HMR_EKEYREJECTED, "the NIC gave key %#llx, wider than the domain's "
                    "mr_key_size of %zu bytes", static_cast<unsigned long long>(key), size);
}

Status NicRegistrar::fit_key(nic::Registration& registration, Tally tally) {
  Status narrowed = [&] {
    try {
      return narrow_key(registration);
    } catch (const std::bad_alloc&) {  // (its reason's text): the registration goes anyway
      (void)deregister_memory(registration, tally);
      throw;
    }
  }();
  if (!narrowed.ok()) (void)deregister_memory(registration, tally);
  return narrowed;
}

Result<nic::Registration> NicRegistrar::register_indirect(
    std::span<const nic::IndirectSegment> segments, uint64_t access) {
  // An indirect key points into registrations the NIC holds: it pins nothing more.
  Result<nic::Registration> registered =
      under_pressure(0, [&] { return nic_.register_indirect(segments, access); });
  if (registered.ok()) HMR_RETURN_IF_ERROR(fit_key(*registered, Tally::counted));
  return registered;
}

Status NicRegistrar::deregister_memory(nic::Registration& registration, Tally tally) noexcept {
  const uint64_t pinned = registration.pinned_bytes;  // (the NIC may clear the record)
  const Stopwatch stopwatch;
  ++deregistering_here;
  Status status = [&] {
    struct Leave {
      ~Leave() { --deregistering_here; }
    } leave;
    try {
      return nic_.deregister(registration);
    } catch (const std::bad_alloc&) {
      return out_of_memory();
    } catch (...) {
      return Status(HMR_EIO, "NIC dereg threw");  // (as short: nothing allocated)
    }
  }();
  unreserve(1, pinned, /*at_nic=*/true);  // dropped either way (see the header)
  if (status.ok()) {
    if (tally == Tally::counted) {
      deregistrations_.fetch_add(1, std::memory_order_relaxed);
      deregistration_ns_.fetch_add(stopwatch.elapsed_ns(), std::memory_order_relaxed);
    }
  } else {
    log_message(LogLevel::warn, "NIC deregistration failed (%s), registration dropped: %s",
                hmr_strerror(status.code()), status.reason().c_str());
  }
  return status;
}

uint64_t NicRegistrar::pinned_after_rereg(const nic::Registration& registration,
                                          std::span<const iovec> translation, bool pins) const {
  // (`pins`, not pinned_bytes != 0: a registration of zero bytes pinned nothing before and
  // pins its new range after.)
  if (translation.empty() || !pins || !nic_.capabilities().pins_host_memory) {
    return registration.pinned_bytes;
  }
  return nic::pinned_bytes_of(translation);
}

template <typename NicCall, typename Usable>
Status NicRegistrar::retry_after_giving_back(NicCall&& nic_call, Usable&& still_usable) {
  GivingBack giving_back;
  for (;;) {
    const uint64_t returned = returned_to_nic_.load(std::memory_order_acquire);
    Status answer = nic_call();
    if (answer.ok() || !is_resource_refusal(answer.code()) || relief_ == nullptr ||
        !still_usable()) {
      return marked(std::move(answer));
    }
    if (!give_back(&giving_back, returned_to_nic_, returned)) {
      return marked(refusal(answer, giving_back.released));
    }
    refusal_retries_.fetch_add(1, std::memory_order_relaxed);
  }
}

Status NicRegistrar::rereg(nic::Registration& registration, const nic::ReregRequest& request,
                           bool pins, bool* usable) {
  *usable = true;  // until the NIC is asked
  // A new range over the pinned-byte bound on its own: nothing given back could make room.
  const uint64_t pinned = pinned_after_rereg(registration, request.translation, pins);
  if (pinned != registration.pinned_bytes) {
    HMR_RETURN_IF_ERROR(over_pinned_bound(pinned, "re-registration", "the MR is unchanged"));
  }
  // A range that pins more than the old one reserves the growth first, giving back idle
  // registrations as a registration does: hmr keeps the bound for a NIC that says it pins
  // (a callback NIC need not enforce RLIMIT_MEMLOCK), and a growth the NIC accepted past it
  // left every later registration refused until this MR closed.
  const uint64_t growth = pinned > registration.pinned_bytes ? pinned - registration.pinned_bytes : 0;
  if (growth != 0) {
    GivingBack giving_back;
    HMR_RETURN_IF_ERROR(marked(reserve(0, growth, &giving_back)));
  }
  // Refused for resources with the registration as it was: what is idle goes back and the NIC
  // is asked again, as for a registration.  A refusal that cost the registration (the NIC's
  // answer) is the caller's to see at once.
  Status answer = retry_after_giving_back(
      [&] { return nic_.rereg(registration, request); },
      [&] { return nic_.usable_after_failed_rereg(registration); });
  if (!answer.ok()) {
    if (growth != 0) unreserve(0, growth, /*at_nic=*/false);
    *usable = nic_.usable_after_failed_rereg(registration);
    return answer;
  }
  // The pages follow (the growth was counted above; a range that pins less gives back the rest).
  if (pinned < registration.pinned_bytes) {
    pinned_.fetch_sub(registration.pinned_bytes - pinned, std::memory_order_relaxed);
  }
  registration.pinned_bytes = pinned;
  return ok_status();
}

Result<nic::MemoryWindow> NicRegistrar::alloc_window(nic::WindowType type) {
  if (!nic_.capabilities().windows_take_registration_keys) return nic_.alloc_window(type);
  nic::MemoryWindow window;
  HMR_RETURN_IF_ERROR(retry_after_giving_back(
      [&]() -> Status {
        Result<nic::MemoryWindow> allocated = nic_.alloc_window(type);
        if (!allocated.ok()) return allocated.status();
        window = *allocated;
        return ok_status();
      },
      [] { return true; }));
  return window;
}

Result<nic::Registration> NicRegistrar::register_range(uintptr_t start, uint64_t len,
                                                       const CacheKey& key) {
  const iovec segment = {reinterpret_cast<void*>(start), len};
  nic::RegistrationRequest request = request_for({&segment, 1}, key.access);
  request.iface = static_cast<hmr_hmem_iface>(key.iface);
  request.device = static_cast<uint64_t>(key.device);
  return register_memory(request);
}

void NicRegistrar::deregister(nic::Registration& registration, uintptr_t start,
                              uint64_t len) noexcept {
  // A cache entry does not keep the pinned bytes; register_range's request pinned these.
  const iovec segment = {reinterpret_cast<void*>(start), len};
  registration.pinned_bytes =
      nic_.capabilities().pins_host_memory ? nic::pinned_bytes_of({&segment, 1}) : 0;
  (void)deregister_memory(registration);  // logged there
}

NicCounters NicRegistrar::counters() const {
  NicCounters counters;
  counters.registrations = registrations_.load(std::memory_order_relaxed);
  counters.deregistrations = deregistrations_.load(std::memory_order_relaxed);
  counters.registration_ns = registration_ns_.load(std::memory_order_relaxed);
  counters.deregistration_ns = deregistration_ns_.load(std::memory_order_relaxed);
  counters.refusal_retries = refusal_retries_.load(std::memory_order_relaxed);
  counters.refusals = refusals_.load(std::memory_order_relaxed);
  counters.held = held_.load(std::memory_order_relaxed);
  counters.pinned_bytes = pinned_.load(std::memory_order_relaxed);
  return counters;
}

Status NicRegistrar::check_allocated(std::span<const iovec> segments) const {
  if (!rules_.check_allocated) return ok_status();
  for (const iovec& segment : segments) {
    // Zero bytes name no memory: at base + 100 of an unmapped page they were refused, since
    // msync looked at the 100 bytes before them (at the page's base they registered).
    if (segment.iov_len == 0) continue;
    const auto start = reinterpret_cast<uintptr_t>(segment.iov_base);
    // msync wants an address on a page boundary: the kernel's page (64 KiB on some aarch64
    // kernels, where 4 KiB rounding failed with EINVAL for most buffers).
    const uintptr_t page = start & ~(uintptr_t{hmem::host_page_size()} - 1);
    // msync fails with ENOMEM exactly when part of the range is not mapped; it touches nothing.
    if (msync(reinterpret_cast<void*>(page), segment.iov_len + (start - page), MS_ASYNC) != 0) {
      // (msync's ENOMEM means "not mapped" here, not out of memory: not shown.)
      const int err = errno;
      return make_error(HMR_EFAULT,
                        "[%p, +%zu) is not (all) mapped memory%s; the domain requires "
                        "HMR_MR_ALLOCATED (the NIC pins every page at registration): register "
                        "memory the process has mapped",
                        segment.iov_base, segment.iov_len,
                        err == ENOMEM ? "" : (std::string(" (") + std::strerror(err) + ")").c_str());
    }
  }
  return ok_status();
}

}  // namespace hmr::core
