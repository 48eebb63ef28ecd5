// NicRegistrar: the one door from a domain to its NIC for registrations.  Every NIC
// registration of the domain, cached or not, host or device, passes here: the ALLOCATED
// check, pre-faulting of large host ranges, the call itself, its time and its count.  It is
// also the backend of the domain's host-memory cache (a miss registers through it).  A NIC
// refusal for resources gives back idle registrations (NicPressureRelief) and tries again,
// until the NIC takes it or nothing idle is left; such a refusal leaves it marked as the NIC's
// (Status::nic_refusal), so a caller can tell it from a driver's failure with the same code.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "cache/registration_cache.h"
#include "nic/nic.h"
#include "registration/nic_pressure.h"
#include "registration/pinned_limit.h"
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
  // The domain's mr_key_size, where keys are integers (0 for RAW keys): a registration's key is
  // carried at that size, and a key wider than it is refused.
  size_t key_size = 0;
};

struct NicCounters {
  uint64_t registrations = 0;
  uint64_t deregistrations = 0;
  uint64_t registration_ns = 0;    // total time spent in the NIC's register call
  uint64_t deregistration_ns = 0;  // and in its deregister call
  uint64_t refusal_retries = 0;    // registrations tried again after a refusal for resources
  uint64_t refusals = 0;           // refusals for resources passed on, nothing idle left
  uint64_t held = 0;               // registrations held at the NIC now (idle cached ones too)
  uint64_t pinned_bytes = 0;       // host bytes they pin (NICs that pin only)
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
  // The most host bytes hmr may hold pinned at the NIC (the smaller of the NIC's own bound and
  // RLIMIT_MEMLOCK, read at domain open; 0 is a bound too); none when not `limit.bounded`.
  // Counted like registrations.
  void set_pinned_limit(const PinnedLimit& limit) {
    max_pinned_ = limit.bounded ? limit.bytes : UINT64_MAX;
  }

  // Gives back up to `count` idle device registrations, which keep dma-buf exports (file
  // descriptors) open: for an export the driver could not make with the process's table full
  // (registration/device_registration.cpp).  Those holding an export alone first, then any
  // holding one (ExportRelief); of each kind this domain's first, then other domains'
  // (registration/export_holders.h: exports are shared by every domain).  How many.
  size_t give_back_exports(size_t count);

  // The NIC request for `segments` under the domain's addressing rules.
  nic::RegistrationRequest request_for(std::span<const iovec> segments, uint64_t access) const;
  // Whether a registration counts in the domain's statistics (nic_registrations, their time):
  // hmr_md_query's registration-cost measurement registers as every registration does, within
  // the limits and with idle ones given back, but is no registration of the application's.
  enum class Tally : bool { counted, measurement };
  // Registers on the NIC (after the ALLOCATED check and pre-faulting) and counts it.
  Result<nic::Registration> register_memory(const nic::RegistrationRequest& request,
                                            Tally tally = Tally::counted);
  // An indirect key over pieces of registrations the NIC already holds; counted as one.
  Result<nic::Registration> register_indirect(std::span<const nic::IndirectSegment> segments,
                                              uint64_t access);
  // HMR_EFAULT unless every page of `segments` is mapped (ALLOCATED domains).  Checked where
  // a NIC registration is made: a cache hit proves the range was mapped and still is.
  Status check_allocated(std::span<const iovec> segments) const;
  // A failure is logged (with the NIC's reason) and returned; the registration is dropped
  // either way, since hmr cannot make a NIC let go.  Never throws (the caches deregister on
  // hmr's reaper thread and in destructors): an exception from the NIC's code, such as
  // std::bad_alloc while it builds its reason, is its failure.
  Status deregister_memory(nic::Registration& registration,
                           Tally tally = Tally::counted) noexcept;
  // Re-registers `registration` in place on the NIC (new range, protection domain and/or
  // access), giving back idle registrations while the NIC refuses for resources and leaves the
  // registration as it was (a new key, more pinned pages); then its pinned bytes follow (its
  // key is the caller's to narrow_key).  `pins`: whether it pins host pages (not ODP; a
  // zero-byte one does, once it has a range).  On failure, `*usable` says whether the
  // registration is as it was: always when hmr refused before asking the NIC (a bound), else
  // as the NIC's answer decides (Nic::usable_after_failed_rereg).
  Status rereg(nic::Registration& registration, const nic::ReregRequest& request, bool pins,
               bool* usable);
  // A memory window at the NIC.  Where windows take their keys from the table registrations
  // use (Capabilities::windows_take_registration_keys: mlx5's mkeys), a refusal for resources
  // gives back idle registrations and tries again, as a registration does; elsewhere it is
  // the caller's at once (giving back could not help, and would empty the cache).  Binding
  // is not retried: verbs takes no key there (ibv_bind_mw changes the window key's tag), and
  // a bind refused with ENOMEM is a full send queue, which no giving back cures.
  Result<nic::MemoryWindow> alloc_window(nic::WindowType type);

  // CacheBackend: a host-memory cache miss.
  Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                           const CacheKey& key) override;
  void deregister(nic::Registration& registration, uintptr_t start, uint64_t len) noexcept override;
  bool deregistration_may_wait_for_application() const override {
    return nic_.capabilities().runs_application_code;
  }

  nic::Nic& nic() const { return nic_; }
  NicCounters counters() const;

  // HMR_ENOMEM (counted as a refusal) when `host_bytes` of page-aligned host memory (`what`,
  // a host shadow to be made) alone would pass the pinned-byte bound on a NIC that pins: so
  // that it is refused before it is allocated and filled.
  Status admits_pinned(uint64_t host_bytes, const char* what);

  // A registration's key at the domain's mr_key_size (NicRules::key_size); HMR_EKEYREJECTED
  // when the NIC's key is wider (what a re-registration gave back, for one).
  Status narrow_key(nic::Registration& registration) const;

 private:
  // narrow_key, with the registration given back when the key does not fit.
  Status fit_key(nic::Registration& registration, Tally tally);

  // One request's giving back so far: how many idle registrations it gave back (said in its
  // refusal), and how often it tried again only because other threads had let registrations
  // go meanwhile (bounded: give_back).
  struct GivingBack {
    size_t released = 0;
    unsigned retries_on_others = 0;
  };
  // Retries a request makes on what other threads let go, with nothing given back by its own
  // look: a thread that registers and deregisters over and over lets go of something during
  // every look, and a request that cannot fit while the MRs it competes with stay open tried
  // again for as long as that thread went on (docs/semantics.md: such a refusal comes at once).
  // Threads meeting a bound together need a few; 64 is far past what they were seen to need.
  static constexpr unsigned kRetriesOnOthers = 64;

  // `register_call`'s answer (a NIC registration), after giving back idle registrations for
  // as long as the NIC refuses for resources and there are any; counted and timed.
  template <typename RegisterCall>
  Result<nic::Registration> under_pressure(uint64_t pinned, RegisterCall&& register_call,
                                           Tally tally = Tally::counted);
  // Counts `registrations` more (1, or 0 for a re-registration's growth) held against limit_
  // and `pinned` bytes against max_pinned_, giving back unused ones first when a bound would
  // be passed; the refusal when none could be given back.
  Status reserve(uint64_t registrations, uint64_t pinned, GivingBack* giving_back);
  // `nic_call`'s answer (a Status, for a NIC call that reserves nothing here: a
  // re-registration, a window), after giving back idle registrations for as long as the NIC
  // refuses for resources, `still_usable()` holds (what was refused is as it was) and
  // something was given back; the refusal with hmr's account when nothing idle is left.
  template <typename NicCall, typename Usable>
  Status retry_after_giving_back(NicCall&& nic_call, Usable&& still_usable);
  // HMR_ENOMEM (counted as a refusal) when `pinned` bytes alone pass max_pinned_: no giving
  // back could make room for `what`.
  Status over_pinned_bound(uint64_t pinned, const char* what, const char* advice);
  // Lowers the accounts; `at_nic`: a registration the NIC held was let go (not a reservation
  // whose NIC call failed).
  void unreserve(uint64_t registrations, uint64_t pinned, bool at_nic);
  // Asks the relief for idle registrations that can cure `shortage`; true when the caller
  // should try again: some were given back, by this thread or another, or `generation`
  // (lowered_ or returned_to_nic_) moved past `before`, read before the attempt that failed,
  // so what was let go between that attempt and this look is not missed (at most
  // kRetriesOnOthers times a request).
  bool give_back(GivingBack* progress, const std::atomic<uint64_t>& generation, uint64_t before,
                 Shortage shortage = Shortage::any);
  Status refusal(const Status& cause, size_t released);
  // The host bytes `registration` pins once re-registered over `translation` (its pages
  // replace the old ones; none given: the range stays, and so do they).
  uint64_t pinned_after_rereg(const nic::Registration& registration,
                              std::span<const iovec> translation, bool pins) const;
  uint64_t pinned_bytes_of(const nic::RegistrationRequest& request) const;

  nic::Nic& nic_;
  const NicRules rules_;
  NicPressureRelief* relief_ = nullptr;
  size_t limit_ = 0;                  // 0: none
  uint64_t max_pinned_ = UINT64_MAX;  // UINT64_MAX: none
  // Registrations held at the NIC now and the host bytes they pin, with those being made
  // (reserved before the NIC call, so threads registering at once cannot pass a bound
  // together).
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> pinned_{0};
  // How often the accounts went down (a deregistration, a failed registration given back),
  // how often the NIC let go of a registration (deregistrations only: a refused attempt
  // frees nothing there, and counting it would let two refused threads retry each other
  // forever), and how many threads are giving back idle registrations now: see give_back.
  std::atomic<uint64_t> lowered_{0};
  std::atomic<uint64_t> returned_to_nic_{0};
  std::atomic<uint32_t> giving_back_{0};
  std::atomic<uint64_t> registrations_{0}, deregistrations_{0}, registration_ns_{0},
      deregistration_ns_{0}, refusal_retries_{0}, refusals_{0};
};

}  // namespace hmr::core
