// A domain's registration cost, as UCX's md_query reports it: a line in the size.
//
// The NIC's own figure is used when it has one (nic::Capabilities::reg_cost).  Otherwise the
// cost is measured on the first hmr_md_query of the domain, not at hmr_domain_open: measuring
// takes milliseconds and most domains are never asked.  The measurement registers and
// deregisters a 64 KiB and a 4 MiB host buffer a few times each, directly on the NIC (not
// through the cache, not counted in the statistics), takes the median of each size and fits
// the line through the two medians.  The result is kept for the life of the domain.  Under a
// pinned-byte bound below 4 MiB (RLIMIT_MEMLOCK, a NIC's own) the sizes shrink to fit it: a
// query under `ulimit -l 64` failed with HMR_ENOMEM, counted as a NIC refusal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "nic/nic.h"
#include "util/status.h"

namespace hmr::core {

// Registers and deregisters [buf, buf+len) once; returns the nanoseconds the registration took.
using TimedRegistration = std::function<Result<uint64_t>(void* buf, size_t len)>;

// The line through (small_len, small_ns) and (large_len, large_ns), never decreasing, with a
// positive overhead.
nic::LinearCost fit_linear_cost(size_t small_len, double small_ns, size_t large_len,
                                double large_ns);

// Measures as described above, with buffers of at most `most_bytes` (page-rounded: what a
// registration pins); every buffer it maps is unmapped again.  HMR_ENOMEM when fewer than two
// pages fit.
Result<nic::LinearCost> measure_registration_cost(const TimedRegistration& register_once,
                                                  uint64_t most_bytes = UINT64_MAX);

class RegistrationCostModel {
 public:
  // The NIC's figure, else the kept measurement, else a new one (no lock held while it runs:
  // two first queries may both measure, and the first to finish is kept).
  Result<nic::LinearCost> get(const nic::Capabilities& caps, const TimedRegistration& measure,
                              uint64_t most_bytes = UINT64_MAX);

 private:
  std::mutex mutex_;
  std::optional<nic::LinearCost> measured_;
};

}  // namespace hmr::core
