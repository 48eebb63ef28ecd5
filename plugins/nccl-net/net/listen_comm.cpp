#include "listen_comm.h"

#include <random>

#include "device.h"
#include "log.h"

namespace hmr::nccl {
namespace {

constexpr size_t kControlReceives = 16;

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
  comm->control_ = ControlChannel::open(device, *comm->endpoint_, kControlReceives, kControlBufferSize, 0, &why);
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

ncclResult_t ListenComm::on_message(std::span<const uint8_t> bytes) {
  std::string why;
  std::optional<ControlMessage> message = decode_control_message(bytes, &why);
  if (!message) {
    log_warn("accept: dropped a connect request: %s", why.c_str());
    return ncclSuccess;
  }
  const auto* request = std::get_if<ConnectRequest>(&*message);
  if (request == nullptr) {
    log_warn("accept: dropped a message that is not a connect request");
    return ncclSuccess;
  }
  if (request->nonce != nonce_) {
    log_warn("accept: dropped a connect request made from another listen handle");
    return ncclSuccess;
  }
  log_info("accept: connect request received (nonce %#llx)", static_cast<unsigned long long>(nonce_));
  std::unique_ptr<RecvComm> comm;
  const ncclResult_t rc = RecvComm::start(*device_, *request, &comm);
  if (rc == ncclSuccess) {
    accepting_.push_back(std::move(comm));
    return ncclSuccess;
  }
  // What the connector got wrong (an address that cannot be used, logged by start()) is
  // its own: the listener goes on.  What this side lacks (an endpoint, a registration: a
  // file or memlock limit) is NCCL's to hear: dropped, the request would leave the
  // connector waiting for an answer, and this accept for a connector, for ever.
  return rc == ncclRemoteError ? ncclSuccess : rc;
}

ncclResult_t ListenComm::accept(std::unique_ptr<RecvComm>* out) {
  std::string why;
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = endpoint_->poll(completions, &error);
    if (n == 0) break;
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
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
    // (A request this side could not answer fails accept, after the rest of the batch is
    // taken and its buffers posted again.)
    ncclResult_t failed = ncclSuccess;
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op == nullptr || op->kind != OperationKind::control_receive) continue;
      const ncclResult_t rc = on_message(control_->received(*op, completions[i].len));
      if (!control_->repost(*op, &why)) return fail(ncclSystemError, "accept: %s", why.c_str());
      if (failed == ncclSuccess) failed = rc;
    }
    if (failed != ncclSuccess) return failed;
  }
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
