// Endpoint: something an MR can be bound to (MR_ENDPOINT), and the initiator and target of
// RMA operations on NICs that move bytes through hmr (the software NIC).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <set>

#include "nic/nic.h"
#include "util/object.h"
#include "util/status.h"

namespace hmr::core {

class Domain;

struct RmaArguments {
  nic::RmaOp op = nic::RmaOp::write;
  void* local = nullptr;
  size_t len = 0;
  void* desc = nullptr;
  uint64_t addr = 0;
  uint64_t key = 0;
  uint64_t operand = 0;
  uint64_t* result = nullptr;
};

class Endpoint : public Tagged<ObjectClass::endpoint> {
 public:
  explicit Endpoint(Domain& domain) : domain_(domain) {}

  Domain& domain() const { return domain_; }

  static Status connect(Endpoint& initiator, Endpoint& target);
  // Disconnects this endpoint from everything; HMR_EBUSY while MRs are bound to it.
  Status prepare_close();
  Status rma(const RmaArguments& arguments);

  void bind_mr() { bound_mrs_.fetch_add(1); }
  void unbind_mr() { bound_mrs_.fetch_sub(1); }

 private:
  Status run_rma(Endpoint& target, const RmaArguments& arguments);

  Domain& domain_;
  std::atomic<int> bound_mrs_{0};
  // Links are guarded by one process-wide lock: RMA holds it shared, so an endpoint cannot
  // be closed under a running operation.
  Endpoint* peer_ = nullptr;
  std::set<Endpoint*> connected_from_;
};

}  // namespace hmr::core
