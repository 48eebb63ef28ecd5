#include "registration/registration_cost.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace hmr::core {
namespace {

constexpr size_t kSmall = 64ULL << 10;
constexpr size_t kLarge = 4ULL << 20;
constexpr int kRepeats = 5;

class Mapping {
 public:
  explicit Mapping(size_t len)
      : len_(len),
        addr_(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {}
  ~Mapping() {
    if (valid()) munmap(addr_, len_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool valid() const { return addr_ != MAP_FAILED; }
  void* addr() const { return addr_; }

 private:
  size_t len_;
  void* addr_;
};

Result<double> median_ns(const TimedRegistration& register_once, void* buf, size_t len) {
  std::array<uint64_t, kRepeats> samples{};
  for (uint64_t& sample : samples) {
    Result<uint64_t> elapsed = register_once(buf, len);
    if (!elapsed.ok()) return elapsed.status();
    sample = *elapsed;
  }
  std::sort(samples.begin(), samples.end());
  return static_cast<double>(samples[kRepeats / 2]);
}

}  // namespace

nic::LinearCost fit_linear_cost(size_t small_len, double small_ns, size_t large_len,
                                double large_ns) {
  nic::LinearCost cost;
  if (large_len > small_len) {
    cost.ns_per_byte = std::max(0.0, (large_ns - small_ns) / static_cast<double>(large_len - small_len));
  }
  // At least a nanosecond: a registration is never free, and UCX users divide by it.
  cost.overhead_ns =
      std::max(1.0, small_ns - cost.ns_per_byte * static_cast<double>(small_len));
  return cost;
}

Result<nic::LinearCost> measure_registration_cost(const TimedRegistration& register_once,
                                                  uint64_t most_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t large_len =
      static_cast<size_t>(std::min<uint64_t>(kLarge, most_bytes)) & ~(page - 1);
  if (large_len < 2 * page) {
    return make_error(HMR_ENOMEM, "cannot measure the registration cost: the NIC may hold only "
                      "%llu bytes pinned for this process (hmr_md_query max_pinned_bytes)",
                      static_cast<unsigned long long>(most_bytes));
  }
  const size_t small_len = std::min(kSmall, (large_len / 2) & ~(page - 1));
  Mapping buffer(large_len);
  if (!buffer.valid()) {
    return make_error(HMR_ENOMEM, "cannot map %zu bytes to measure the registration cost",
                      large_len);
  }
  // Resident pages: the cost measured is the NIC's, not the first-touch page faults'.
  std::memset(buffer.addr(), 0, large_len);
  // The first registration warms the NIC's own paths (tables, caches) and is not counted.
  Result<uint64_t> warm = register_once(buffer.addr(), small_len);
  if (!warm.ok()) return warm.status();
  Result<double> small = median_ns(register_once, buffer.addr(), small_len);
  if (!small.ok()) return small.status();
  Result<double> large = median_ns(register_once, buffer.addr(), large_len);
  if (!large.ok()) return large.status();
  return fit_linear_cost(small_len, *small, large_len, *large);
}

Result<nic::LinearCost> RegistrationCostModel::get(const nic::Capabilities& caps,
                                                   const TimedRegistration& measure,
                                                   uint64_t most_bytes) {
  if (caps.reg_cost) return *caps.reg_cost;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (measured_) return *measured_;
  }
  Result<nic::LinearCost> cost = measure_registration_cost(measure, most_bytes);
  if (!cost.ok()) return cost.status();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!measured_) measured_ = *cost;
  return *measured_;
}

}  // namespace hmr::core
