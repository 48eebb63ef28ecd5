// Domain::registration_cost: how the measurement registers on this domain's NIC.
#include "core/domain.h"
#include "util/stopwatch.h"

namespace hmr::core {
namespace {
// A key from the top of the key space, where applications seldom pick theirs; one in use is
// skipped (the domain's requested-key registry says which).
constexpr int kKeyAttempts = 16;
}  // namespace

Result<nic::LinearCost> Domain::registration_cost() {
  const TimedRegistration register_once = [this](void* buf, size_t len) -> Result<uint64_t> {
    const iovec segment{buf, len};
    nic::RegistrationRequest request =
        nic_registrar_.request_for({&segment, 1}, HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE);
    // Never reachable by a peer where the domain lets hmr keep it so.
    request.enabled = !has_mode(HMR_MR_ENDPOINT);
    std::optional<uint64_t> reserved;
    if (!has_mode(HMR_MR_PROV_KEY)) {
      // (Below ~0 with 8-byte keys: that is FI_KEY_NOTAVAIL, which no registration answers.)
      const uint64_t top = rules_.key_size >= 8 ? UINT64_MAX - 1
                                                : (uint64_t{1} << (8 * rules_.key_size)) - 1;
      for (int i = 0; i < kKeyAttempts && !reserved; ++i) {
        if (requested_keys_.reserve(top - static_cast<uint64_t>(i)).ok()) {
          reserved = top - static_cast<uint64_t>(i);
        }
      }
      if (!reserved) {
        return make_error(HMR_ENOKEY, "no free key to measure the registration cost with");
      }
      request.requested_key = reserved;
    }
    // Through the registrar, as every registration of the domain: within the NIC's mr_cnt and
    // the pinned-byte bound, and with idle cached registrations given back when the NIC is
    // full (a refusal the application's stated limits could have avoided is no measurement).
    const Stopwatch stopwatch;
    constexpr auto kTally = NicRegistrar::Tally::measurement;
    Result<nic::Registration> registered = nic_registrar_.register_memory(request, kTally);
    const uint64_t elapsed = stopwatch.elapsed_ns();
    Status status = registered.ok() ? nic_registrar_.deregister_memory(*registered, kTally)
                                    : registered.status();
    if (reserved) requested_keys_.release(*reserved);
    if (!status.ok()) return status;
    return elapsed;
  };
  // Within the pinned-byte bound: a bound under the 4 MiB measured failed every query.
  const uint64_t most_bytes = pinned_limit_.bounded ? pinned_limit_.bytes : UINT64_MAX;
  return registration_cost_.get(nic_->capabilities(), register_once, most_bytes);
}

}  // namespace hmr::core
