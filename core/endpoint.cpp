#include "core/endpoint.h"

#include <shared_mutex>

#include "core/domain.h"
#include "util/fork_held_lock.h"

namespace hmr::core {
namespace {

// Who is connected to whom, across every domain of the process: held across fork()
// (util/fork_held_lock.h), or a child connecting endpoints of its own domain waited for ever
// for a parent's thread that was connecting or closing endpoints at the fork.
std::shared_mutex& links_mutex() {
  static auto* mutex = new std::shared_mutex;  // never destroyed: endpoints may outlive statics
  return *mutex;
}

[[maybe_unused]] const bool fork_handlers_registered = hold_lock_across_fork<&links_mutex>();

}  // namespace

Status Endpoint::connect(Endpoint& initiator, Endpoint& target) {
  if (!initiator.domain().nic().capabilities().rma || !target.domain().nic().capabilities().rma) {
    return make_error(HMR_EOPNOTSUPP, "RMA through hmr endpoints needs the software NIC");
  }
  std::unique_lock<std::shared_mutex> lock(links_mutex());
  if (initiator.peer_ != nullptr) initiator.peer_->connected_from_.erase(&initiator);
  initiator.peer_ = &target;
  target.connected_from_.insert(&initiator);
  return ok_status();
}

Status Endpoint::prepare_close() {
  if (bound_mrs_.load() != 0) {
    return make_error(HMR_EBUSY, "endpoint has %d MRs bound; close them first", bound_mrs_.load());
  }
  std::unique_lock<std::shared_mutex> lock(links_mutex());
  for (Endpoint* initiator : connected_from_) initiator->peer_ = nullptr;
  connected_from_.clear();
  if (peer_ != nullptr) peer_->connected_from_.erase(this);
  peer_ = nullptr;
  return ok_status();
}

Status Endpoint::rma(const RmaArguments& arguments) {
  if (arguments.op == nic::RmaOp::fetch_add) {
    if (arguments.result == nullptr) return make_error(HMR_EINVAL, "fetch_add result is NULL");
    if (arguments.addr % 8 != 0) {
      return make_error(HMR_EINVAL, "fetch_add address %#llx is not 8-byte aligned",
                        static_cast<unsigned long long>(arguments.addr));
    }
  } else {
    if (arguments.local == nullptr) return make_error(HMR_EINVAL, "RMA buffer is NULL");
    if (arguments.len == 0) return make_error(HMR_EINVAL, "RMA length is 0");
  }
  std::shared_lock<std::shared_mutex> lock(links_mutex());
  if (peer_ == nullptr) {
    return make_error(HMR_EINVAL, "endpoint is not connected: call hmr_ep_connect first");
  }
  Status status = run_rma(*peer_, arguments);
  domain_.stats().record_rma(status.ok(), arguments.len);
  return status;
}

Status Endpoint::run_rma(Endpoint& target, const RmaArguments& arguments) {
  if (arguments.desc != nullptr) {
    const uint64_t local_access = arguments.op == nic::RmaOp::write ? HMR_WRITE : HMR_READ;
    HMR_RETURN_IF_ERROR(domain_.nic().check_local(arguments.desc, arguments.local,
                                                  arguments.len, local_access));
  }
  nic::RmaRequest request;
  if (domain_.raw_keys()) {
    std::optional<KeyBytes> raw = domain_.mapped_keys().find(arguments.key);
    if (!raw) {
      return make_error(HMR_EACCES,
                        "key %#llx is not mapped in this RAW domain: use hmr_mr_map_raw",
                        static_cast<unsigned long long>(arguments.key));
    }
    request.key = *raw;
  } else {
    request.key = KeyBytes::from_u64(arguments.key, sizeof(uint64_t));
  }
  request.op = arguments.op;
  request.target_endpoint = &target;
  request.addr = arguments.addr;
  request.local = arguments.local;
  request.len = arguments.op == nic::RmaOp::fetch_add ? sizeof(uint64_t) : arguments.len;
  request.operand = arguments.operand;
  request.result = arguments.result;
  return target.domain().nic().remote_access(request);
}

}  // namespace hmr::core
