#include "listen_comm.h"

#include <random>

#include "device.h"
#include "log.h"

namespace hmr::nccl {
namespace {

constexpr size_t kControlReceives = 16;
// Refusals in flight at once (more queue in the channel).
constexpr size_t kControlSends = 2;
// How long accept() lets a refusal reach its connector before it fails, and the most
// refusals one listener sends (only connectors that know its nonce are refused).
constexpr auto kRefusalDrainTime = std::chrono::seconds(2);
constexpr int kMaxRefusals = 16;

uint64_t fresh_nonce() {
  std::random_device random;
  uint64_t nonce = 0;
  while (nonce == 0) nonce = uint64_t{random()} << 32 | random();
  return nonce;
}

}  // namespace

ncclResult_t ListenComm::open(Device& device, std::span<uint8_t, kHandleSize> handle,
                              std::unique_ptr<ListenComm>* out) {
  std::unique_ptr<ListenComm> comm(new ListenComm(device));
  std::string why;
  comm->endpoint_ = Endpoint::open(device.libfabric(), device.info(), device.domain(), &why);
  if (!comm->endpoint_) return fail(ncclSystemError, "listen: %s", why.c_str());
  comm->control_ = ControlChannel::open(device, *comm->endpoint_, kControlReceives,
                                       kControlBufferSize, kControlSends, &why);
  if (!comm->control_ || !comm->control_->post_receives(&why)) {
    return fail(ncclSystemError, "listen: %s", why.c_str());
  }
  comm->nonce_ = fresh_nonce();
  const ListenHandle contents{comm->nonce_, provider_tag(device.provider()), comm->endpoint_->address()};
  if (!encode(contents, handle, &why)) return fail(ncclInternalError, "listen: %s", why.c_str());
  *out = std::move(comm);
  return ncclSuccess;
}

ListenComm::~ListenComm() {
  accepting_.clear();
  endpoint_.reset();
  control_.reset();
}

void ListenComm::on_message(std::span<const uint8_t> bytes) {
  std::string why;
  std::optional<ControlMessage> message = decode_control_message(bytes, &why);
  if (!message) {
    log_warn("accept: dropped a connect request: %s", why.c_str());
    return;
  }
  const auto* request = std::get_if<ConnectRequest>(&*message);
  if (request == nullptr) {
    log_warn("accept: dropped a message that is not a connect request");
    return;
  }
  if (request->nonce != nonce_) {
    log_warn("accept: dropped a connect request made from another listen handle");
    return;
  }
  log_info("accept: connect request received (nonce %#llx)", static_cast<unsigned long long>(nonce_));
  if (failure_ != ncclSuccess) {
    // This listener is failing (accept returns the failure once the refusal left): a later
    // connector is refused too, not answered by a comm nobody will take.
    refuse(*request, failure_reason_);
    return;
  }
  std::unique_ptr<RecvComm> comm;
  forget_last_failure();
  const ncclResult_t rc = RecvComm::start(*device_, *request, &comm);
  if (rc == ncclSuccess) {
    accepting_.push_back(std::move(comm));
    return;
  }
  // What the connector got wrong (an address that cannot be used, logged by start()) is
  // its own: the listener goes on.  What this side lacks (an endpoint, a registration: a
  // file or memlock limit) is NCCL's to hear, and the connector's: dropped, the request
  // would leave the connector waiting for an answer, and this accept for a connector, for
  // ever.  accept() fails once the connector was told (due_failure()).
  if (rc == ncclRemoteError) return;
  failure_ = rc;
  failure_reason_ = last_failure();
  if (failure_reason_.empty()) failure_reason_ = "the listener could not answer";
  failure_due_ = std::chrono::steady_clock::now() + kRefusalDrainTime;
  refuse(*request, failure_reason_);
}

void ListenComm::refuse(const ConnectRequest& request, const std::string& reason) {
  std::string why = "more than " + std::to_string(kMaxRefusals) + " refused";
  fi_addr_t connector = FI_ADDR_UNSPEC;
  // (The address stays in the listening endpoint's vector until the listener closes.)
  if (refusals_ >= kMaxRefusals || !endpoint_->insert(request.address, &connector, &why) ||
      !control_->send(ConnectRefused{nonce_, refusal_reason(reason)}, connector, request.port,
                      &why)) {
    log_warn("accept: could not tell the connector its request was refused: %s", why.c_str());
    return;
  }
  ++refusals_;
}

ncclResult_t ListenComm::due_failure() {
  if (failure_ == ncclSuccess) return ncclSuccess;
  if (control_->busy() && std::chrono::steady_clock::now() < failure_due_) return ncclSuccess;
  return failure_;
}

ncclResult_t ListenComm::accept(std::unique_ptr<RecvComm>* out) {
  std::string why;
  if (!control_->flush(&why)) {
    // A queued refusal the provider will not take (it stays queued): accept fails now.
    if (failure_due_ > std::chrono::steady_clock::now()) {
      log_warn("accept: a refusal could not be sent: %s", why.c_str());
    }
    failure_due_ = std::chrono::steady_clock::now();
  }
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = endpoint_->poll(completions, &error);
    if (n == 0) break;
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
      if (op != nullptr && op->kind == OperationKind::control_send) {
        control_->sent(*op);  // (a connector that went away: nobody left to tell)
        log_warn("accept: a refusal did not reach its connector: %s", error.reason.c_str());
        continue;
      }
      if (op != nullptr && op->kind == OperationKind::control_receive) {
        // A message the listener could not take (longer than any connect request, so the
        // provider truncated it): anyone may send to a listening address, and the next
        // connector must still be accepted.
        log_warn("accept: dropped a message the listening endpoint could not receive: %s",
                 error.reason.c_str());
        if (!control_->repost(*op, &why)) return fail(ncclSystemError, "accept: %s", why.c_str());
        continue;
      }
      return fail(ncclSystemError, "accept: the listening endpoint failed: %s", error.reason.c_str());
    }
    // (A request this side could not answer fails accept once its refusal left: due_failure.)
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op != nullptr && op->kind == OperationKind::control_send) control_->sent(*op);
      if (op == nullptr || op->kind != OperationKind::control_receive) continue;
      on_message(control_->received(*op, completions[i].len));
      if (!control_->repost(*op, &why)) return fail(ncclSystemError, "accept: %s", why.c_str());
    }
  }
  if (const ncclResult_t rc = due_failure(); rc != ncclSuccess) return rc;
  for (auto it = accepting_.begin(); it != accepting_.end(); ++it) {
    bool accepted = false;
    if ((*it)->poll_accepted(&accepted) != ncclSuccess) {
      // A connector that went away must not take the listener with it.
      log_warn("accept: dropped a connection whose accept could not be delivered");
      accepting_.erase(it);
      return ncclSuccess;
    }
    if (accepted) {
      log_info("accept: connection accepted");
      *out = std::move(*it);
      accepting_.erase(it);
      return ncclSuccess;
    }
  }
  return ncclSuccess;
}

}  // namespace hmr::nccl
