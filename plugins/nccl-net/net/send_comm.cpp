#include "send_comm.h"

#include <rdma/fi_errno.h>

#include <unistd.h>

#include <climits>

#include "../wire/write_completion.h"
#include "device.h"
#include "log.h"
#include "memory_handle.h"

namespace hmr::nccl {
namespace {

// Announcements (2 per posted receive at most in flight, with slack) and the accept.
constexpr size_t kControlReceives = 2 * kMaxRequests + 2;
constexpr size_t kControlSends = 8;
// How long closeSend lets a queued failure notice reach the receiver.
constexpr auto kDrainTime = std::chrono::seconds(2);

}  // namespace

ncclResult_t SendComm::start(Device& device, const ListenHandle& handle, int timeout_ms,
                             int write_timeout_ms, std::unique_ptr<SendComm>* out) {
  std::unique_ptr<SendComm> comm(new SendComm(device));
  comm->write_timeout_ = std::chrono::milliseconds(write_timeout_ms);
  std::string why;
  comm->endpoint_ = Endpoint::open(device.libfabric(), device.info(), device.domain(), &why);
  if (!comm->endpoint_) return fail(ncclSystemError, "connect: %s", why.c_str());
  comm->control_ = ControlChannel::open(device, *comm->endpoint_, kControlReceives, kControlSends, &why);
  if (!comm->control_ || !comm->control_->post_receives(&why)) {
    return fail(ncclSystemError, "connect: %s", why.c_str());
  }
  if (!comm->endpoint_->insert(handle.address, &comm->listener_, &why)) {
    return fail(ncclRemoteError, "connect: the listener's address from the handle is unusable "
                "on %s: %s", device.provider().c_str(), why.c_str());
  }
  comm->nonce_ = handle.nonce;
  comm->deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!comm->control_->send(ConnectRequest{handle.nonce, comm->endpoint_->address(),
                                           static_cast<uint32_t>(getpid()), own_process_space()},
                            comm->listener_, &why)) {
    return fail(ncclRemoteError, "connect: %s", why.c_str());
  }
  *out = std::move(comm);
  return ncclSuccess;
}

SendComm::~SendComm() {
  // The endpoint first: closing it ends every operation that still points into the control
  // buffers and the requests.
  endpoint_.reset();
  control_.reset();
}

ncclResult_t SendComm::fail_comm(ncclResult_t result, const std::string& reason) {
  if (failure_.empty()) {
    failure_ = reason;
    failure_result_ = result;
    log_warn("send comm failed: %s", reason.c_str());
  }
  return failure_result_;
}

ncclResult_t SendComm::poll_connected(bool* connected) {
  *connected = false;
  if (const ncclResult_t rc = progress(); rc != ncclSuccess) return rc;
  if (connected_) {
    *connected = true;
    return ncclSuccess;
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    return fail_comm(ncclRemoteError,
                     "connect: no answer from the listener before the deadline "
                     "(HMR_NCCL_CONNECT_TIMEOUT); the peer may have gone away");
  }
  return ncclSuccess;
}

ncclResult_t SendComm::progress() {
  if (!failure_.empty()) return failure_result_;
  if (peer_watch_.gone()) {
    return fail_comm(ncclRemoteError, "the receiving process (pid " +
                                          std::to_string(peer_watch_.pid()) + ") exited");
  }
  std::string why;
  if (!control_->flush(&why)) return fail_comm(ncclSystemError, why);
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = endpoint_->poll(completions, &error);
    if (n == 0) return ncclSuccess;
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
      if (op != nullptr && op->kind == OperationKind::data_write) {
        // The receiver's NIC refused the write (a key it does not know, a range outside its
        // registration): this message fails, and the receiver is told which buffer.
        auto* request = static_cast<SendRequest*>(op->owner);
        request->state = RequestState::failed;
        request->error = fail(ncclRemoteError, "the RMA write of a %zu-byte message into the "
                              "receiver's announced buffer failed: %s", request->size,
                              error.reason.c_str());
        const SendFailure notice{request->target.slot, request->target.generation,
                                 request->target.index, SendFailureReason::write_failed,
                                 request->size};
        if (!control_->send(notice, peer_, &why)) log_warn("could not tell the receiver: %s", why.c_str());
        continue;
      }
      if (op != nullptr && op->kind == OperationKind::control_send) control_->sent(*op);
      return fail_comm(ncclRemoteError, (connected_ ? "" : "connect: ") +
                                            std::string("control message to the peer failed: ") +
                                            error.reason);
    }
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op == nullptr) continue;  // nothing writes into a send comm's memory with CQ data
      switch (op->kind) {
        case OperationKind::control_receive: {
          const ncclResult_t rc = on_message(control_->received(*op, completions[i].len));
          if (!control_->repost(*op, &why)) return fail_comm(ncclSystemError, why);
          if (rc != ncclSuccess) return rc;
          break;
        }
        case OperationKind::control_send: control_->sent(*op); break;
        case OperationKind::data_write:
          static_cast<SendRequest*>(op->owner)->state = RequestState::done;
          break;
        case OperationKind::flush_read: break;
      }
    }
    // A short batch emptied the queue: another read now would only take the provider's locks
    // again (its progress runs on the next call).
    if (n < static_cast<int>(std::size(completions))) return ncclSuccess;
  }
}

ncclResult_t SendComm::on_message(std::span<const uint8_t> bytes) {
  std::string why;
  std::optional<ControlMessage> message = decode_control_message(bytes, &why);
  if (!message) return fail_comm(ncclRemoteError, "from the receiver: " + why);
  if (auto* accept = std::get_if<ConnectAccept>(&*message)) {
    if (connected_ || accept->nonce != nonce_) {
      log_warn("connect: ignored an accept for another connection (nonce %#llx)",
               static_cast<unsigned long long>(accept->nonce));
      return ncclSuccess;
    }
    peer_watch_ = PeerWatch::of(accept->pid, accept->process_space);
    if (!endpoint_->insert(accept->address, &peer_, &why)) {
      return fail_comm(ncclRemoteError, "connect: the receiver's address is unusable: " + why);
    }
    connected_ = true;
    log_info("connect: connected (listener nonce %#llx)", static_cast<unsigned long long>(nonce_));
    return ncclSuccess;
  }
  if (auto* announcement = std::get_if<ReceiveAnnouncement>(&*message)) {
    // A receiver has at most NCCL_NET_MAX_REQUESTS receives posted, numbered from the oldest
    // the sender has not filled; anything else is a broken peer.
    const uint32_t ahead = announcement->sequence - next_sequence_;  // modulo 2^32
    std::optional<Announcement>& place = announced_[announcement->sequence % kMaxRequests];
    if (ahead >= kMaxRequests || place.has_value()) {
      return fail_comm(ncclRemoteError,
                       "the receiver announced receive " + std::to_string(announcement->sequence) +
                           " while the oldest unfilled one is " + std::to_string(next_sequence_) +
                           (ahead >= kMaxRequests ? " (more than " + std::to_string(kMaxRequests) +
                                                        " posted receives)"
                                                  : " (announced twice)"));
    }
    place = Announcement{*announcement, 0};
    return ncclSuccess;
  }
  return fail_comm(ncclRemoteError, "the receiver sent a message a send comm never expects");
}

SendRequest* SendComm::free_request() {
  // From where the last search ended: requests complete about in the order they were posted,
  // so the next idle one is usually the first looked at.
  for (size_t i = 0; i < requests_.size(); ++i) {
    const size_t at = (next_free_ + i) % requests_.size();
    if (requests_[at].state == RequestState::idle) {
      next_free_ = at + 1;
      return &requests_[at];
    }
  }
  return nullptr;
}

SendComm::Announcement* SendComm::oldest() {
  std::optional<Announcement>& place = announced_[next_sequence_ % kMaxRequests];
  return place.has_value() ? &*place : nullptr;
}

void SendComm::use_buffer(size_t index) {
  std::optional<Announcement>& place = announced_[next_sequence_ % kMaxRequests];
  place->used_mask |= static_cast<uint8_t>(1u << index);
  if (place->used_mask == (1u << place->message.count) - 1) {
    place.reset();
    ++next_sequence_;
  }
}

void SendComm::reject_message(Announcement& announcement, size_t index,
                                      SendFailureReason reason, uint64_t size) {
  const ReceiveAnnouncement& m = announcement.message;
  const SendFailure notice{m.slot, m.generation, static_cast<uint8_t>(index), reason, size};
  use_buffer(index);  // (m is gone after this when it was the last buffer)
  std::string why;
  if (!control_->send(notice, peer_, &why)) log_warn("could not tell the receiver: %s", why.c_str());
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, MemoryHandle* mhandle,
                             void** request) {
  *request = nullptr;
  if (!failure_.empty()) {
    return fail(failure_result_, "isend on a send comm that failed earlier: %s", failure_.c_str());
  }
  if (!connected_) return fail(ncclInvalidUsage, "isend before connect returned the comm");
  if (size > kMaxMessageSize) {
    return fail(ncclInvalidArgument, "isend of %zu bytes: over the plugin's maxP2pBytes", size);
  }
  if (size > 0 && (mhandle == nullptr || !mhandle->contains(data, size))) {
    return fail(ncclInvalidArgument, "isend of %zu bytes at %p: the buffer is not inside the "
                "memory handle given (regMr it first)", size, data);
  }
  if (mhandle != nullptr && mhandle->device != device_) {
    return fail(ncclInvalidArgument, "isend: the memory handle was registered on another device");
  }
  // An announcement already here needs no progress first (the request's test() runs it, as
  // NCCL's IB transport's isend reads its FIFO and nothing else): one completion-queue read
  // less per message.
  Announcement* front = oldest();
  if (front == nullptr) {
    if (const ncclResult_t rc = progress(); rc != ncclSuccess) return rc;
    front = oldest();
    if (front == nullptr) return ncclSuccess;  // the receiver has not posted it (or we heard not)
  }

  Announcement& announcement = *front;
  const ReceiveAnnouncement& m = announcement.message;
  size_t index = m.count;
  for (size_t i = 0; i < m.count; ++i) {
    if (!(announcement.used_mask & (1u << i)) && m.buffers[i].tag == tag) {
      index = i;
      break;
    }
  }
  if (index == m.count) {
    // Another sender of a grouped receive (PXN, shared comms) is a step ahead: its buffer is
    // in the next receive.  As NCCL's IB transport does: no request, NCCL calls again, and
    // the oldest receive is filled first.
    return ncclSuccess;
  }
  // Copies: finishing the announcement below pops it, and `m` with it.
  const AnnouncedBuffer target = m.buffers[index];
  const WriteCompletion where{m.slot, m.generation, static_cast<uint8_t>(index), size};
  if (size > target.size) {
    reject_message(announcement, index, SendFailureReason::too_large, size);
    return fail(ncclInvalidUsage, "isend of %zu bytes with tag %d: the receiver posted a buffer "
                "of only %llu bytes; nothing was written, and the receiver is told", size, tag,
                static_cast<unsigned long long>(target.size));
  }
  SendRequest* slot = free_request();
  if (slot == nullptr) return ncclSuccess;  // NCCL retries once earlier sends completed

  const uint64_t completion = encode(where);
  slot->comm = this;
  slot->write.kind = OperationKind::data_write;
  slot->write.owner = slot;
  const ssize_t rc = endpoint_->write_with_data(data, size, mhandle ? mhandle->desc : nullptr,
                                                completion, peer_, target.address, target.key,
                                                &slot->write);
  if (rc == -FI_EAGAIN) return progress();  // no request: NCCL calls again
  if (rc != 0) {
    return fail(ncclSystemError, "fi_writedata of %zu bytes failed: %s", size,
                device_->libfabric().describe(rc).c_str());
  }
  use_buffer(index);  // m dies here when it was the last buffer
  slot->state = RequestState::pending;
  slot->pending_tests = 0;
  slot->size = size;
  slot->target = where;
  slot->error = ncclSuccess;
  *request = slot;
  return ncclSuccess;
}

bool SendComm::write_timed_out(SendRequest& request) const {
  // The clock is read only by writes that stay pending over kTestsPerClockRead tests (most
  // complete well before): a clock read per message was a measurable part of a small one.
  // So the timeout counts from a few tests after the post, microseconds late at most.
  if (++request.pending_tests % kTestsPerClockRead != 0) return false;
  const auto now = std::chrono::steady_clock::now();
  if (request.pending_tests == kTestsPerClockRead) {
    request.first_looked = now;
    return false;
  }
  return now - request.first_looked > write_timeout_;
}

ncclResult_t SendComm::test(SendRequest* request, int* done, int* size) {
  if (done != nullptr) *done = 0;
  if (request->state == RequestState::pending) {
    const ncclResult_t rc = progress();
    if (rc != ncclSuccess && request->state == RequestState::pending) {
      request->state = RequestState::idle;
      return rc;
    }
  }
  if (request->state == RequestState::pending && write_timed_out(*request)) {
    // The provider neither completed nor failed the write (a receiver that stopped, a
    // provider that lost the answer).  Its operation still points into this request, so the
    // slot can never be reused: the whole comm fails, as NCCL would abort it anyway.
    const SendFailure notice{request->target.slot, request->target.generation,
                             request->target.index, SendFailureReason::write_failed, request->size};
    std::string why;
    if (!control_->send(notice, peer_, &why)) log_warn("could not tell the receiver: %s", why.c_str());
    return fail_comm(ncclRemoteError,
                     "the RMA write of a " + std::to_string(request->size) + "-byte message did " +
                         "not complete within HMR_NCCL_WRITE_TIMEOUT (" +
                         std::to_string(write_timeout_.count() / 1000.0).substr(0, 5) +
                         " s): the receiver's process or NIC may have failed");
  }
  switch (request->state) {
    case RequestState::done:
      if (done != nullptr) *done = 1;
      if (size != nullptr) *size = request->size > INT_MAX ? INT_MAX : static_cast<int>(request->size);
      request->state = RequestState::idle;
      return ncclSuccess;
    case RequestState::failed:
      request->state = RequestState::idle;
      return request->error;
    default: return ncclSuccess;
  }
}

void SendComm::drain() {
  const auto deadline = std::chrono::steady_clock::now() + kDrainTime;
  while (control_ && control_->busy() && std::chrono::steady_clock::now() < deadline) {
    if (progress() != ncclSuccess) return;
  }
}

}  // namespace hmr::nccl
