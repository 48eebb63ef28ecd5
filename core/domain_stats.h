// A domain's statistics: lock-free counters, read through hmr_domain_query_stats().  The
// NIC registration counters are the NicRegistrar's, the cache's are the caches'.
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <cstdint>

namespace hmr::core {

class DomainStats {
 public:
  void record_registration(bool ok) { (ok ? registrations_ : registration_errors_).fetch_add(1, kOrder); }
  void record_mr_open(uint64_t bytes) {
    mr_open_.fetch_add(1, kOrder);
    mr_bytes_.fetch_add(bytes, kOrder);
  }
  void record_mr_close(uint64_t bytes) {
    mr_open_.fetch_sub(1, kOrder);
    mr_bytes_.fetch_sub(bytes, kOrder);
  }
  void record_rma(bool ok, uint64_t bytes) {
    if (!ok) {
      rma_errors_.fetch_add(1, kOrder);
      return;
    }
    rma_ops_.fetch_add(1, kOrder);
    rma_bytes_.fetch_add(bytes, kOrder);
  }
  hmr_domain_stats snapshot() const;

 private:
  static constexpr std::memory_order kOrder = std::memory_order_relaxed;
  std::atomic<uint64_t> mr_open_{0}, mr_bytes_{0}, registrations_{0}, registration_errors_{0},
      rma_ops_{0}, rma_bytes_{0}, rma_errors_{0};
};

// A registration call's failure, counted once however the call ends: with a failure it
// returns, or with an exception (out of memory) from anywhere in it.  The call settle()s it
// where it succeeded, or where something else counts the outcome (an asynchronous
// registration's completion).
class RegistrationFailureTally {
 public:
  explicit RegistrationFailureTally(DomainStats& stats) : stats_(stats) {}
  ~RegistrationFailureTally() {
    if (!settled_) stats_.record_registration(false);
  }
  RegistrationFailureTally(const RegistrationFailureTally&) = delete;
  RegistrationFailureTally& operator=(const RegistrationFailureTally&) = delete;
  void settle() { settled_ = true; }

 private:
  DomainStats& stats_;
  bool settled_ = false;
};

inline hmr_domain_stats DomainStats::snapshot() const {
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  stats.mr_open = mr_open_.load(kOrder);
  stats.mr_bytes = mr_bytes_.load(kOrder);
  stats.registrations = registrations_.load(kOrder);
  stats.registration_errors = registration_errors_.load(kOrder);
  stats.rma_ops = rma_ops_.load(kOrder);
  stats.rma_bytes = rma_bytes_.load(kOrder);
  stats.rma_errors = rma_errors_.load(kOrder);
  return stats;
}

}  // namespace hmr::core
