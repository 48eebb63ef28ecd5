// NicRegistrar: the one door from a domain to its NIC for registrations.  Every NIC
// registration of the domain, cached or not, host or device, passes here: the ALLOCATED
// check, pre-faulting of large host ranges, the call itself, its time and its count.  It is
// also the backend of the domain's host-memory cache (a miss registers through it).  A NIC
// refusal for resources gives back idle registrations (NicPressureRelief) and tries again,
// until the NIC takes it or nothing idle is left.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "cache/registration_cache.h"
#include "nic/nic.h"
#include "registration/nic_pressure.h"
#include "registration/prefault.h"
#include "util/status.h"

namespace hmr::core {

// The domain's rules a NIC registration follows (from the negotiated mr_mode).
struct NicRules {
  bool virt_addr = true;           // HMR_MR_VIRT_ADDR: peers address bytes by VA
  bool track_page_changes = false;  // HMR_MR_MMU_NOTIFY
  bool check_allocated = false;    // HMR_MR_ALLOCATED: every page must be mapped
  PrefaultSettings prefault;
  size_t reg_threads = 1;          // HMR_REG_THREADS
};

struct NicCounters {
  uint64_t registrations = 0;
  uint64_t deregistrations = 0;
  uint64_t registration_ns = 0;    // total time spent in the NIC's register call
  uint64_t deregistration_ns = 0;  // and in its deregister call
  uint64_t refusal_retries = 0;    // registrations tried again after a refusal for resources
  uint64_t refusals = 0;           // refusals for resources passed on, nothing idle left
};

class NicRegistrar final : public CacheBackend {
 public:
  NicRegistrar(nic::Nic& nic, const NicRules& rules) : nic_(nic), rules_(rules) {}
  // Who gives back idle registrations when the NIC refuses one for resources (the domain,
  // once its caches exist); null: refusals go to the caller as they are.
  void set_pressure_relief(NicPressureRelief* relief) { relief_ = relief; }
  // The most registrations hmr may hold at the NIC at once (the domain's mr_cnt, from the
  // NIC's stated limit); 0: no limit.  Idle cached registrations count: before one more would
  // pass the limit, unused ones are given back, and with none left the registration fails.
  void set_registration_limit(size_t limit) { limit_ = limit; }

  // The NIC request for `segments` under the domain's addressing rules.
  nic::RegistrationRequest request_for(std::span<const iovec> segments, uint64_t access) const;
  // Registers on the NIC (after the ALLOCATED check and pre-faulting) and counts it.
  Result<nic::Registration> register_memory(const nic::RegistrationRequest& request);
  // An indirect key over pieces of registrations the NIC already holds; counted as one.
  Result<nic::Registration> register_indirect(std::span<const nic::IndirectSegment> segments,
                                              uint64_t access);
  // HMR_EFAULT unless every page of `segments` is mapped (ALLOCATED domains).  Checked where
  // a NIC registration is made: a cache hit proves the range was mapped and still is.
  Status check_allocated(std::span<const iovec> segments) const;
  // A failure is logged (with the NIC's reason) and returned; the registration is dropped
  // either way, since hmr cannot make a NIC let go.
  Status deregister_memory(nic::Registration& registration);

  // CacheBackend: a host-memory cache miss.
  Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                           const CacheKey& key) override;
  void deregister(nic::Registration& registration) override { (void)deregister_memory(registration); }

  nic::Nic& nic() const { return nic_; }
  NicCounters counters() const;

 private:

  // `register_call`'s answer (a NIC registration), after giving back idle registrations for
  // as long as the NIC refuses for resources and there are any; counted and timed.
  template <typename RegisterCall>
  Result<nic::Registration> under_pressure(RegisterCall&& register_call);
  // Counts one more registration held against limit_, giving back unused ones first when the
  // limit is reached; false when none could be given back.
  bool reserve(size_t* released);
  Status refusal(const Status& cause, size_t released);

  nic::Nic& nic_;
  const NicRules rules_;
  NicPressureRelief* relief_ = nullptr;
  size_t limit_ = 0;
  // Registrations held at the NIC now, and those being made (reserved before the NIC call,
  // so threads registering at once cannot pass limit_ together).
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> registrations_{0}, deregistrations_{0}, registration_ns_{0},
      deregistration_ns_{0}, refusal_retries_{0}, refusals_{0};
};

}  // namespace hmr::core
