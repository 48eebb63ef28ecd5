#include "send_comm.h"

#include <rdma/fi_errno.h>

#include <unistd.h>

#include <algorithm>
#include <climits>

#include "../wire/write_completion.h"
#include "device.h"
#include "landed_bytes_check.h"
#include "log.h"
#include "memory_handle.h"

namespace hmr::nccl {
namespace {

// Failure notices to the receiver (its messages arrive on the shared endpoint's buffers).
constexpr size_t kControlSends = 8;
// How long closeSend lets a queued failure notice reach the receiver.
constexpr auto kDrainTime = std::chrono::seconds(2);
// How long closeSend waits for its send_closed to complete (drain()).
constexpr auto kClosedNoticeGrace = std::chrono::milliseconds(100);

}  // namespace

ncclResult_t SendComm::start(Device& device, const ListenHandle& handle,
                             std::unique_ptr<SendComm>* out) {
  std::unique_ptr<SendComm> comm(new SendComm(device));
  const Settings& settings = device.settings();
  comm->write_timeout_ = std::chrono::milliseconds(settings.write_timeout_ms);
  comm->offered_eager_max_ = settings.eager_max;
  comm->reorder_eager_ = settings.reorder_announcements;
  comm->check_landed_ = settings.check_landed;
  std::string why;
  auto port = device.attach_comm(&why);
  if (!port) return fail(ncclSystemError, "connect: %s", why.c_str());
  comm->posted_ = std::make_unique<Posted>();
  comm->posted_->on = std::move(port);
  comm->posted_->control = ControlChannel::open_on(device, comm->port(), kControlSends, &why);
  if (!comm->posted_->control) return fail(ncclSystemError, "connect: %s", why.c_str());
  // (The listener's address is its device's shared endpoint: PeerKind says why it stays.)
  if (!comm->port().insert(handle.address, &comm->listener_, &why,
                           SharedEndpoint::Port::PeerKind::shared_endpoint)) {
    return fail(ncclRemoteError, "connect: the listener's address from the handle is unusable "
                "on %s: %s", device.provider().c_str(), why.c_str());
  }
  comm->nonce_ = handle.nonce;
  comm->deadline_ = settings.connect_timeout_ms == 0
                        ? std::chrono::steady_clock::time_point::max()
                        : std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(settings.connect_timeout_ms);
  ConnectRequest request{handle.nonce, comm->port().address(), comm->port().id(),
                         static_cast<uint32_t>(getpid()), own_process_space()};
  request.eager_max = comm->offered_eager_max_;
  if (!comm->control().send(request, comm->listener_, handle.port, &why)) {
    return fail(ncclRemoteError, "connect: %s", why.c_str());
  }
  *out = std::move(comm);
  return ncclSuccess;
}

SendComm::~SendComm() {
  // What its operations point into stays until they ended (an aborted comm's may not have).
  if (posted_) device_->retire_comm(std::move(posted_));
}

ncclResult_t SendComm::fail_comm(ncclResult_t result, const std::string& reason) {
  if (failure_.empty()) {
    failure_ = reason;
    failure_result_ = result;
    // (In closeSend nobody is left to be told: its send_closed may find the receiver's
    // endpoint gone, an ordinary end.)
    if (closing_) {
      log_info("send comm failed while closing: %s", reason.c_str());
    } else {
      log_warn("send comm failed: %s", reason.c_str());
    }
  }
  return failure_result_;
}

ncclResult_t SendComm::poll_connected(bool* connected) {
  *connected = false;
  if (const ncclResult_t rc = progress(); rc != ncclSuccess) return rc;
  // Connected once the accept came and the ready went out (control().busy(): its send has
  // not completed), so the provider's connection to the recv comm's endpoint is up before
  // NCCL's first isend, which may be eager.
  if (connected_ && !control().busy()) {
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
  std::string why;
  if (!control().flush(&why)) return fail_comm(ncclSystemError, why);
  // Nothing of NCCL's buffers goes out once the comm is closing: NCCL deregisters and frees
  // them before closeSend (sendProxyFree), and drain() only lets control messages go.
  if (!closing_ && !peer_watch_.gone()) {  // (nothing new to a receiver seen gone: isend())
    if (held_eager_ != nullptr && ++held_progress_ >= 2) {  // no eager send followed it
      if (const ncclResult_t rc = release_held_eager(); rc != ncclSuccess) return rc;
    }
    post_unposted_tails();
  }
  Completion completions[16];
  for (bool first = true;; first = false) {
    CompletionError error;
    const int n = port().poll(completions, &error);
    // The receiver's exit, looked at only once nothing more comes (QuietAfterExit,
    // peer_watch.h): a write or eager message it took before it exited completes, though its
    // completion may still be on its way here (found by a review).  What arrives is the
    // completion of something posted before the exit was seen (nothing is posted after).
    if (first && peer_watch_.gone() && quiet_after_exit_.settled(n != 0)) {
      return fail_comm(ncclRemoteError, "the receiving process (pid " +
                                            std::to_string(peer_watch_.pid()) + ") exited");
    }
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
      if (op != nullptr && (op->kind == OperationKind::data_write || op->kind == OperationKind::eager_send)) {
        --data_in_flight_;
        ++data_failed_;  // (it may have landed all the same: no exact count from now on)
        // The receiver's NIC refused the write (a key it does not know, a range outside its
        // registration), or the eager send failed: this message fails, and the receiver is
        // told which buffer.
        auto* request = static_cast<SendRequest*>(op->owner);
        part_failed(*request, fail(ncclRemoteError, "the %s of a %zu-byte message failed: %s",
                                   request->eager ? "eager send"
                                                  : "RMA write into the receiver's announced buffer",
                                   request->size, error.reason.c_str()));
        part_ended(*request);
        continue;
      }
      if (op != nullptr && op->kind == OperationKind::control_send) control().sent(*op);
      // (No operation: the shared endpoint's own failure, which says what it is.)
      return fail_comm(ncclRemoteError,
                       (connected_ ? "" : "connect: ") +
                           std::string(op != nullptr ? "control message to the peer failed: " : "") +
                           error.reason);
    }
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op == nullptr) continue;  // nothing writes into a send comm's memory with CQ data
      switch (op->kind) {
        case OperationKind::control_send: control().sent(*op); break;
        case OperationKind::data_write:
        case OperationKind::eager_send:
          --data_in_flight_;
          ++data_delivered_;
          part_ended(*static_cast<SendRequest*>(op->owner));
          break;
        case OperationKind::control_receive:  // (the shared endpoint's, never a port's)
        case OperationKind::eager_copy:
        case OperationKind::flush_read: break;
      }
    }
    // The receiver's messages, which the shared endpoint sorted to this comm's port (this
    // poll or another comm's).
    uint8_t message[kControlBufferSize];
    while (const size_t len = port().take_message(message)) {
      if (const ncclResult_t rc = on_message({message, len}); rc != ncclSuccess) return rc;
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
    if (accept->eager_max > offered_eager_max_ ||
        (accept->eager_max != 0 && accept->eager_credits == 0)) {
      return fail_comm(ncclRemoteError, "connect: the receiver answered eager max " +
                                            std::to_string(accept->eager_max) + " with " +
                                            std::to_string(accept->eager_credits) +
                                            " credits to an offer of " +
                                            std::to_string(offered_eager_max_));
    }
    eager_max_ = accept->eager_max;
    eager_credits_ = accept->eager_credits;
    peer_port_ = accept->port;
    if (!port().insert(accept->address, &peer_, &why)) {
      return fail_comm(ncclRemoteError, "connect: the receiver's address is unusable: " + why);
    }
    // The first message to the recv comm's own endpoint (wire/control_message.h, version 7).
    if (!control().send(ConnectReady{nonce_}, peer_, peer_port_, &why)) {
      return fail_comm(ncclRemoteError, "connect: " + why);
    }
    connected_ = true;
    log_info("connect: connected (listener nonce %#llx, eager max %u)",
             static_cast<unsigned long long>(nonce_), eager_max_);
    return ncclSuccess;
  }
  if (auto* refused = std::get_if<ConnectRefused>(&*message)) {
    if (connected_ || refused->nonce != nonce_) {
      log_warn("connect: ignored a refusal for another connection (nonce %#llx)",
               static_cast<unsigned long long>(refused->nonce));
      return ncclSuccess;
    }
    return fail_comm(ncclRemoteError, "connect: the listener could not make the connection "
                                      "for want of its own resources, and said: \"" +
                                          refused->reason + "\"");
  }
  if (auto* announcement = std::get_if<ReceiveAnnouncement>(&*message)) return on_announcement(*announcement);
  if (auto* credit = std::get_if<EagerCredit>(&*message)) return on_credit(*credit);
  return fail_comm(ncclRemoteError, "the receiver sent a message a send comm never expects");
}

ncclResult_t SendComm::on_announcement(const ReceiveAnnouncement& announcement) {
  // Buffers this side already filled eagerly (their ordinal is behind the tag's next one)
  // are done; an announcement with nothing else left is dropped.
  Announcement kept{announcement, 0};
  const uint8_t all = static_cast<uint8_t>((1u << announcement.count) - 1);
  for (size_t i = 0; i < announcement.count; ++i) {
    const AnnouncedBuffer& b = announcement.buffers[i];
    const Stream* stream = streams_.find(b.tag);
    if (stream != nullptr && ordinal_before(b.ordinal, stream->next_ordinal)) {
      kept.used_mask |= static_cast<uint8_t>(1u << i);
    }
  }
  if (kept.used_mask == all) return ncclSuccess;
  std::optional<Announcement>& place = announced_[announcement.slot];
  if (place.has_value()) {
    // The receiver reuses a slot only when its receive is over: an announcement of the same
    // generation again is a broken peer; a newer one replaces what is left of the old (a
    // receive that failed).
    if (place->message.generation == announcement.generation) {
      return fail_comm(ncclRemoteError, "the receiver announced slot " +
                                            std::to_string(announcement.slot) + " generation " +
                                            std::to_string(announcement.generation) + " twice");
    }
  } else {
    ++live_announcements_;
  }
  place = kept;
  return ncclSuccess;
}

ncclResult_t SendComm::on_credit(const EagerCredit& credit) {
  for (size_t i = 0; i < credit.count; ++i) {
    Stream* stream = streams_.find(credit.tags[i].tag);
    // A credit is the receiver's running count of the tag's eager messages it consumed, so
    // one that arrives after a newer one (a fabric that does not order messages, EFA's SRD:
    // the credits at 16 and 32 in flight at once) counts fewer than already returned: stale,
    // and ignored.  (Counts wrap; two less than 2^31 apart compare by their difference.)
    const auto returned = static_cast<int32_t>(
        stream ? credit.tags[i].consumed - stream->eager_consumed : 0);
    if (stream != nullptr && returned <= 0) continue;
    if (stream == nullptr ||
        static_cast<uint32_t>(returned) > stream->eager_sent - stream->eager_consumed) {
      return fail_comm(ncclRemoteError, "the receiver returned eager credits for tag " +
                                            std::to_string(credit.tags[i].tag) +
                                            " it was never sent messages for");
    }
    stream->eager_consumed = credit.tags[i].consumed;
  }
  return ncclSuccess;
}

SendRequest* SendComm::free_request() {
  // From where the last search ended: requests complete about in the order they were posted,
  // so the next idle one is usually the first looked at.
  auto& all = requests();
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t at = (next_free_ + i) % all.size();
    if (all[at].state == RequestState::idle) {
      next_free_ = at + 1;
      return &all[at];
    }
  }
  return nullptr;
}

bool SendComm::find_announced(int32_t tag, uint32_t ordinal, size_t* slot, size_t* index) const {
  if (live_announcements_ == 0) return false;
  for (size_t s = 0; s < announced_.size(); ++s) {
    const std::optional<Announcement>& a = announced_[s];
    if (!a) continue;
    for (size_t i = 0; i < a->message.count; ++i) {
      const AnnouncedBuffer& b = a->message.buffers[i];
      if (b.tag == tag && b.ordinal == ordinal && !(a->used_mask & (1u << i))) {
        *slot = s;
        *index = i;
        return true;
      }
    }
  }
  return false;
}

void SendComm::use_buffer(size_t slot, size_t index) {
  std::optional<Announcement>& place = announced_[slot];
  place->used_mask |= static_cast<uint8_t>(1u << index);
  if (place->used_mask == (1u << place->message.count) - 1) {
    place.reset();
    --live_announcements_;
  }
}

void SendComm::reject_message(size_t slot, size_t index, SendFailureReason reason, uint64_t size) {
  const ReceiveAnnouncement& m = announced_[slot]->message;
  const SendFailure notice{m.slot, m.generation, static_cast<uint8_t>(index), reason, size};
  use_buffer(slot, index);  // (m is gone after this when it was the last buffer)
  std::string why;
  if (!control().send(notice, peer_, peer_port_, &why)) log_warn("could not tell the receiver: %s", why.c_str());
}

void SendComm::notify_failure(const SendRequest& request) {
  std::string why;
  const bool told =
      request.eager
          ? control().send(EagerFailure{request.eager_target.tag, request.eager_target.ordinal,
                                        EagerFailureReason::send_failed, request.size},
                           peer_, peer_port_, &why)
          : control().send(SendFailure{request.target.slot, request.target.generation,
                                       request.target.index, SendFailureReason::write_failed,
                                       request.size},
                           peer_, peer_port_, &why);
  if (!told) log_warn("could not tell the receiver: %s", why.c_str());
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, MemoryHandle* mhandle,
                             void** request) {
  *request = nullptr;
  if (!failure_.empty()) {
    return fail(failure_result_, "isend on a send comm that failed earlier: %s", failure_.c_str());
  }
  if (!connected_) return fail(ncclInvalidUsage, "isend before connect returned the comm");
  // The provider's max_msg_size (at most the plugin's own 1 TiB - 1), told to NCCL as
  // maxP2pBytes; NCCL 2.28 only checks that value's range, so a message over it is refused
  // here, before anything is written, rather than by the provider's write.
  if (const size_t limit = device_->properties().max_message; size > limit) {
    return fail(ncclInvalidArgument, "isend of %zu bytes: over this NIC's message limit of %zu "
                "bytes (the provider's max_msg_size, told to NCCL as maxP2pBytes)", size, limit);
  }
  if (size > 0 && (mhandle == nullptr || !mhandle->contains(data, size))) {
    return fail(ncclInvalidArgument, "isend of %zu bytes at %p: the buffer is not inside the "
                "memory handle given (regMr it first)", size, data);
  }
  if (mhandle != nullptr && mhandle->device != device_) {
    return fail(ncclInvalidArgument, "isend: the memory handle was registered on another device");
  }
  // A receiver seen gone gets nothing new: a write or eager send to a process that exited may
  // never complete (on shm 1.17 one held back the shared endpoint's later completions, other
  // comms' included: shared_endpoint.h).  No request while what was posted before it exited
  // settles; progress() then fails the comm (QuietAfterExit).
  if (peer_watch_.gone()) return progress();
  Stream& stream = streams_.at(tag);
  // An announcement already here, or an eager send allowed, needs no progress first (the
  // request's test() runs it, as NCCL's IB transport's isend reads its FIFO and nothing
  // else): one completion-queue read less per message.  Otherwise progress once (an
  // announcement or credits may be waiting) and look again.
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t slot = 0;
    size_t index = 0;
    const uint32_t ordinal = stream.next_ordinal;
    if (find_announced(tag, stream.next_ordinal, &slot, &index)) {
      const ncclResult_t rc = write_announced(data, size, stream, slot, index, mhandle, request);
      if (check_landed_) log_checksum(rc, *request, data, size, tag, ordinal, mhandle);
      return rc;
    }
    if (may_send_eagerly(size, stream)) {
      const ncclResult_t rc = send_eagerly(data, size, stream, mhandle, request);
      if (check_landed_) log_checksum(rc, *request, data, size, tag, ordinal, mhandle);
      return rc;
    }
    if (attempt == 0) {
      if (const ncclResult_t rc = progress(); rc != ncclSuccess) return rc;
    }
  }
  // The receiver has not posted this tag's next buffer (or we heard not), or this tag's eager
  // credits are all in use: no request, NCCL calls again.  A sender of a grouped receive that
  // is a step ahead of another simply fills its own buffer of the next receive.
  note_refusal(stream);
  return ncclSuccess;
}

void SendComm::log_checksum(ncclResult_t rc, const void* request, const void* data, size_t size,
                            int tag, uint32_t ordinal, const MemoryHandle* mhandle) const {
  if (rc != ncclSuccess || request == nullptr || (size != 0 && !mhandle->host_memory)) return;
  log_info("%s", message_checksum_line("sent", nonce_, tag, ordinal, size,
                                       message_checksum(data, size)).c_str());
}

void SendComm::note_refusal(Stream& stream) {
  // Not an error: NCCL may wait for a receive as long as it likes.  But a tag the receiver
  // never posts a buffer for (a mismatched tag) would otherwise wait in silence.
  std::chrono::steady_clock::duration waited;
  if (stream.warned || !stream.refused.count(&waited) || waited <= write_timeout_) return;
  stream.warned = true;
  log_warn("isend with tag %d has found no buffer of the receiver's for %.1f s (HMR_NCCL_WRITE_TIMEOUT): "
           "no receive posted with that tag since its buffer %u", stream.tag,
           std::chrono::duration<double>(waited).count(), stream.next_ordinal);
}

ncclResult_t SendComm::write_announced(void* data, size_t size, Stream& stream, size_t slot,
                                       size_t index, MemoryHandle* mhandle, void** request) {
  const ReceiveAnnouncement& m = announced_[slot]->message;
  const AnnouncedBuffer target = m.buffers[index];
  const WriteTarget where{m.slot, m.generation, static_cast<uint8_t>(index)};
  if (size > target.size) {
    ++stream.next_ordinal;
    reject_message(slot, index, SendFailureReason::too_large, size);
    return fail(ncclInvalidUsage, "isend of %zu bytes with tag %d: the receiver posted a buffer "
                "of only %llu bytes; nothing was written, and the receiver is told", size,
                target.tag, static_cast<unsigned long long>(target.size));
  }
  SendRequest* req = free_request();
  if (req == nullptr) return ncclSuccess;  // NCCL retries once earlier sends completed
  req->comm = this;
  req->write.kind = OperationKind::data_write;
  req->write.owner = req;
  req->tail_write.kind = OperationKind::data_write;
  req->tail_write.owner = req;
  req->data = data;
  req->desc = mhandle ? mhandle->desc : nullptr;
  req->remote_address = target.address;
  req->remote_key = target.key;
  req->size = size;
  req->target = where;
  // One write, or a head and a tail (wire/write_completion.h); the head first, and a tail the
  // provider cannot take at once goes with the next progress.
  const WritePlan plan = plan_writes(size);
  const PlannedWrite& first = plan.writes[0];
  const ssize_t rc = port().write_with_data(
      data, first.bytes, req->desc,
      encode(WriteCompletion{where.slot, where.generation, where.index, first.part, first.value}),
      peer_, target.address, target.key, &req->write);
  if (rc == -FI_EAGAIN) return progress();  // no request: NCCL calls again
  if (rc != 0) {
    return fail(ncclSystemError, "fi_writedata of %zu bytes failed: %s", size,
                device_->libfabric().describe(rc).c_str());
  }
  ++data_in_flight_;
  ++stream.next_ordinal;
  stream.refused.reset();
  stream.warned = false;
  use_buffer(slot, index);
  req->state = RequestState::pending;
  req->pending.reset();
  req->eager = false;
  req->error = ncclSuccess;
  req->part_failed = false;
  req->in_flight = 1;
  req->tail_unposted = plan.count == 2;
  if (req->tail_unposted) post_tail(*req);
  *request = req;
  return ncclSuccess;
}

void SendComm::post_tail(SendRequest& request) {
  if (request.part_failed) {  // the head failed: no more bytes of this message go
    request.tail_unposted = false;
    end_if_over(request);
    return;
  }
  const PlannedWrite tail = plan_writes(request.size).writes[1];
  const WriteTarget& where = request.target;
  const ssize_t rc = port().write_with_data(
      static_cast<const uint8_t*>(request.data) + tail.offset, tail.bytes, request.desc,
      encode(WriteCompletion{where.slot, where.generation, where.index, tail.part, tail.value}),
      peer_, request.remote_address + tail.offset, request.remote_key, &request.tail_write);
  if (rc == -FI_EAGAIN) {
    if (std::find(unposted_tails_.begin(), unposted_tails_.end(), &request) == unposted_tails_.end()) {
      unposted_tails_.push_back(&request);  // (reserved for every request: no allocation)
    }
    return;
  }
  request.tail_unposted = false;
  if (rc == 0) {
    ++request.in_flight;
    ++data_in_flight_;
    return;
  }
  part_failed(request, fail(ncclSystemError, "fi_writedata of the last %llu bytes of a %zu-byte "
                            "message failed: %s", static_cast<unsigned long long>(tail.bytes),
                            request.size, device_->libfabric().describe(rc).c_str()));
  end_if_over(request);
}

void SendComm::post_unposted_tails() {
  for (size_t i = 0; i < unposted_tails_.size();) {
    SendRequest& request = *unposted_tails_[i];
    post_tail(request);
    if (request.tail_unposted) {
      ++i;
    } else {
      unposted_tails_[i] = unposted_tails_.back();
      unposted_tails_.pop_back();
    }
  }
}

void SendComm::part_failed(SendRequest& request, ncclResult_t error) {
  if (request.part_failed) return;  // the first failure is the one reported
  request.part_failed = true;
  request.error = error;
}

void SendComm::part_ended(SendRequest& request) {
  if (request.in_flight > 0) --request.in_flight;
  end_if_over(request);
}

void SendComm::end_if_over(SendRequest& request) {
  if (request.in_flight != 0 || request.tail_unposted) return;
  if (!request.part_failed) {
    request.state = RequestState::done;
    return;
  }
  // Told only now, once no part of the message can still land in the receiver's buffer (a
  // late part would find its receive failed and fail the receiver's whole comm instead).
  request.state = RequestState::failed;
  notify_failure(request);
}

ncclResult_t SendComm::send_eagerly(void* data, size_t size, Stream& stream,
                                    MemoryHandle* mhandle, void** request) {
  SendRequest* req = free_request();
  if (req == nullptr) return ncclSuccess;
  req->comm = this;
  req->write.kind = OperationKind::eager_send;
  req->write.owner = req;
  req->size = size;
  req->eager = true;
  req->eager_target = EagerAddress{stream.tag, stream.next_ordinal};
  req->data = data;
  req->desc = mhandle ? mhandle->desc : nullptr;
  req->in_flight = 1;
  req->part_failed = false;
  req->tail_unposted = false;
  if (reorder_eager_ && held_eager_ == nullptr) {
    held_eager_ = req;
    held_progress_ = 0;
  } else {
    const ssize_t rc = post_eager(*req);
    if (rc == -FI_EAGAIN) return progress();
    if (rc != 0) {
      return fail(ncclSystemError, "fi_senddata of a %zu-byte eager message failed: %s", size,
                  device_->libfabric().describe(rc).c_str());
    }
    if (const ncclResult_t held = release_held_eager(); held != ncclSuccess) return held;
  }
  ++stream.next_ordinal;
  ++stream.eager_sent;
  stream.refused.reset();
  stream.warned = false;
  req->state = RequestState::pending;
  req->pending.reset();
  req->error = ncclSuccess;
  *request = req;
  return ncclSuccess;
}

ssize_t SendComm::post_eager(SendRequest& request) {
  const ssize_t rc = port().send_with_data(request.data, request.size, request.desc,
                                           encode(request.eager_target), peer_, &request.write);
  if (rc == 0) ++data_in_flight_;
  return rc;
}

ncclResult_t SendComm::release_held_eager() {
  if (held_eager_ == nullptr) return ncclSuccess;
  const ssize_t rc = post_eager(*held_eager_);
  if (rc == -FI_EAGAIN) return ncclSuccess;  // the next progress tries again
  SendRequest& held = *held_eager_;
  held_eager_ = nullptr;
  if (rc != 0) {
    part_failed(held, fail(ncclSystemError, "fi_senddata of a %zu-byte eager message failed: %s",
                           held.size, device_->libfabric().describe(rc).c_str()));
    part_ended(held);
  }
  return ncclSuccess;
}

bool SendComm::write_timed_out(SendRequest& request) const {
  // An eager send is not timed: it may complete only with the receiver's progress (shm above
  // 4 KiB, ofi_rxm above 16 KiB, delivery-complete on EFA), and NCCL lets a receiving rank be
  // late for as long as it likes (a rank busy elsewhere; NCCL's own transports wait).  A
  // receiver that died is reported by the provider (its connection fails) or, on the same
  // host, by the peer watch.  An RMA write goes into a buffer the receiver announced.
  if (request.eager) return false;
  // (Most writes complete before the clock is ever read for them: sampled_wait.h.)
  std::chrono::steady_clock::duration waited;
  return request.pending.count(&waited) && waited > write_timeout_;
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
    notify_failure(*request);
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

std::vector<const void*> SendComm::request_addresses() const {
  std::vector<const void*> out;
  out.reserve(requests().size());
  for (const SendRequest& request : requests()) out.push_back(&request);
  return out;
}

void SendComm::drain() {
  closing_ = true;
  const auto deadline = std::chrono::steady_clock::now() + kDrainTime;
  // (A notice for a receiver seen gone would reach nobody: no waiting for it.)
  auto may_wait = [&](std::chrono::steady_clock::time_point until) {
    return posted_ && std::chrono::steady_clock::now() < until && !peer_watch_.gone();
  };
  // A failure notice queued for the receiver goes first (send_closed must not overtake it on
  // a fabric that reorders messages: the receive it names would have failed already).
  while (may_wait(deadline) && control().busy()) {
    if (progress() != ncclSuccess) return;
  }
  // One progress first, so the provider has taken in a connection the receiver already
  // closed (ofi_rxm handles its events in progress): the notice is then refused at once
  // (-FI_EAGAIN) instead of posted on a dead connection and left in flight.
  if (posted_ && progress() != ncclSuccess) return;
  if (!tell_where_messages_end()) return;
  const auto grace = std::min(deadline, std::chrono::steady_clock::now() + kClosedNoticeGrace);
  while (may_wait(grace) && control().busy()) {
    if (progress() != ncclSuccess) return;
  }
}

bool SendComm::tell_where_messages_end() {
  // Only an exact count is worth sending: none while a write or eager message is in flight
  // (an aborted comm's; NCCL closes a comm whose sends completed) or after one failed (it
  // may have landed all the same), nor from a failed comm.  The receiver then falls back on
  // the quiet after this process's exit (QuietAfterExit), as for a killed sender.
  if (!connected_ || !failure_.empty() || data_in_flight_ != 0 || data_failed_ != 0 ||
      !posted_ || control().busy() || peer_watch_.gone()) {
    return false;
  }
  // Nor to a recv comm of this very process: it cannot outlive this one, and libfabric 1.17's
  // shm crashed sending to an endpoint of its own process that had closed (its recv comm
  // closed first: SharedSendEndpoint.ASendCommClosedAfterItsReceiver...).
  if (peer_watch_.is_this_process()) return false;
  // Sent now or never: where the provider's connection to the receiver is gone (its recv comm
  // closed first; ranks close without waiting for each other) the send would wait for a new
  // one that never comes (ofi_rxm: 2 s of the drain's bound per comm, measured).
  std::string why;
  const ssize_t rc = control().send_now(SendClosed{data_delivered_}, peer_, peer_port_, &why);
  if (rc != 0 && rc != -FI_EAGAIN) log_info("closeSend: send_closed not sent: %s", why.c_str());
  return rc == 0;
}

}  // namespace hmr::nccl
