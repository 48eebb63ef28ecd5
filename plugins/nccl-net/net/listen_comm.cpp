#include "listen_comm.h"

#include <random>

#include "device.h"
#include "log.h"

namespace hmr::nccl {
namespace {

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
  // A port on the device's shared endpoint, whose receive buffers take the connect requests
  // addressed to it: no endpoint of its own (ofi_rxm's ~20 MB each, for every channel's
  // listener while NCCL connects).
  auto port = device.attach_comm(&why);
  if (!port) return fail(ncclSystemError, "listen: %s", why.c_str());
  comm->posted_ = std::make_unique<Posted>();
  comm->posted_->on = std::move(port);
  comm->posted_->control = ControlChannel::open_on(device, comm->port(), kControlSends, &why);
  if (!comm->posted_->control) return fail(ncclSystemError, "listen: %s", why.c_str());
  comm->nonce_ = fresh_nonce();
  const ListenHandle contents{comm->nonce_, provider_tag(device.provider()), comm->port().address(),
                              comm->port().id()};
  if (!encode(contents, handle, &why)) return fail(ncclInternalError, "listen: %s", why.c_str());
  *out = std::move(comm);
  return ncclSuccess;
}

ListenComm::~ListenComm() {
  accepting_.clear();
  // A refusal still in flight points into the control channel: it stays until it ended.
  if (posted_) device_->retire_comm(std::move(posted_));
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
  fail_listener(rc, std::chrono::steady_clock::now() + kRefusalDrainTime);
  refuse(*request, failure_reason_);
}

void ListenComm::fail_listener(ncclResult_t rc, std::chrono::steady_clock::time_point due) {
  if (failure_ == ncclSuccess) {
    failure_ = rc;
    failure_reason_ = last_failure();
    if (failure_reason_.empty()) failure_reason_ = "the listener could not answer";
  }
  failure_due_ = due;
}

void ListenComm::refuse(const ConnectRequest& request, const std::string& reason) {
  std::string why = "more than " + std::to_string(kMaxRefusals) + " refused";
  fi_addr_t connector = FI_ADDR_UNSPEC;
  // (The connector's address is its device's shared endpoint: PeerKind says why it stays.)
  if (refusals_ >= kMaxRefusals ||
      !port().insert(request.address, &connector, &why,
                     SharedEndpoint::Port::PeerKind::shared_endpoint) ||
      !control().send(ConnectRefused{nonce_, refusal_reason(reason)}, connector, request.port,
                      &why)) {
    log_warn("accept: could not tell the connector its request was refused: %s", why.c_str());
    return;
  }
  ++refusals_;
}

ncclResult_t ListenComm::due_failure() {
  if (failure_ == ncclSuccess) return ncclSuccess;
  if (control().busy() && std::chrono::steady_clock::now() < failure_due_) return ncclSuccess;
  return failure_;
}

ncclResult_t ListenComm::accept(std::unique_ptr<RecvComm>* out) {
  std::string why;
  if (!control().flush(&why)) {
    // A queued refusal the provider will not take (it stays queued): accept fails now.
    if (failure_due_ > std::chrono::steady_clock::now()) {
      log_warn("accept: a refusal could not be sent: %s", why.c_str());
    }
    failure_due_ = std::chrono::steady_clock::now();
  }
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = port().poll(completions, &error);
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
      if (op != nullptr && op->kind == OperationKind::control_send) {
        control().sent(*op);  // (a connector that went away: nobody left to tell)
        log_warn("accept: a refusal did not reach its connector: %s", error.reason.c_str());
        continue;
      }
      // More connect requests than the port holds unread (a peer with the handle flooding
      // it), or the shared endpoint's own failure, which says what it is.  The port reports
      // it once; the listener stays failed (what it lost cannot be asked for again).
      const ncclResult_t rc =
          fail(ncclSystemError, "accept: the listener's endpoint failed: %s", error.reason.c_str());
      fail_listener(rc, std::chrono::steady_clock::now());
      return rc;
    }
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op != nullptr && op->kind == OperationKind::control_send) control().sent(*op);
    }
    // The requests the shared endpoint sorted to this port (this poll or another comm's).  A
    // request this side could not answer fails accept once its refusal left (due_failure).
    uint8_t message[kControlBufferSize];
    while (const size_t len = port().take_message(message)) on_message({message, len});
    if (n < static_cast<int>(std::size(completions))) break;
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
