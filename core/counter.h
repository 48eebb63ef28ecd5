// Counter: counts remote events on the MRs bound to it (fi_cntr with FI_REMOTE_WRITE).
#pragma once

#include <atomic>
#include <cstdint>

#include "util/object.h"

namespace hmr::core {

class Domain;

class Counter : public Tagged<ObjectClass::counter> {
 public:
  explicit Counter(Domain& domain) : domain_(domain) {}

  Domain& domain() const { return domain_; }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }
  // The NIC adds to it directly when a remote event lands.
  std::atomic<uint64_t>* sink() { return &value_; }

  void bind_mr() { bound_mrs_.fetch_add(1); }
  void unbind_mr() { bound_mrs_.fetch_sub(1); }
  bool has_bound_mrs() const { return bound_mrs_.load() != 0; }

 private:
  Domain& domain_;
  std::atomic<uint64_t> value_{0};
  std::atomic<int> bound_mrs_{0};
};

}  // namespace hmr::core
