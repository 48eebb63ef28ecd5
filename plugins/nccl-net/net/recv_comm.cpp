#include "recv_comm.h"

#include <rdma/fi_errno.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "../wire/eager_data.h"
#include "../wire/write_completion.h"
#include "device.h"
#include "eager.h"
#include "log.h"
#include "memory_handle.h"

namespace hmr::nccl {
namespace {

// Failure notices from the sender (rare), and the announcements of every posted receive plus
// the accept.
constexpr size_t kControlReceives = 16;
constexpr size_t kControlSends = kMaxRequests + 4;
// Tests of a receive left unannounced (eager only) before it is announced after all: its
// message may be one the sender cannot send eagerly (larger than the buffer and the eager
// max), and the sender's refusal must reach both ends.  Harmless when it was only slow.
constexpr uint32_t kTestsBeforeLateAnnouncement = 1u << 14;
// Descriptors the provider's connection to a recv comm's endpoint takes when it is accepted
// (ofi_rxm over tcp: the socket and its bookkeeping; measured by Spare/AcceptWithFewDescriptors,
// with room to spare).
constexpr int kDescriptorsForAConnection = 4;

static_assert(kDescriptorsForAConnection <= 8, "descriptors_short() opens at most 8");

// 0 when `count` more descriptors can be opened now (they are opened and closed again), else
// EMFILE (the process's RLIMIT_NOFILE) or ENFILE (the system's table).  Any other failure of
// the probe says nothing of descriptors: 0.
int descriptors_short(int count) {
  int opened[8];
  int made = 0;
  int error = 0;
  for (; made < count && made < 8; ++made) {
    opened[made] = eventfd(0, EFD_CLOEXEC);
    if (opened[made] < 0) {
      error = errno;
      break;
    }
  }
  for (int i = 0; i < made; ++i) close(opened[i]);
  return error == EMFILE || error == ENFILE ? error : 0;
}

}  // namespace

ncclResult_t RecvComm::start(Device& device, const ConnectRequest& request,
                             std::unique_ptr<RecvComm>* out) {
  std::unique_ptr<RecvComm> comm(new RecvComm(device));
  const Settings& settings = device.settings();
  comm->flush_host_memory_ = settings.flush_host_memory;
  comm->flush_eagain_ = settings.flush_eagain;
  comm->ready_timeout_ms_ =
      settings.connect_timeout_ms != 0 ? settings.connect_timeout_ms : settings.write_timeout_ms;
  comm->eager_max_ = std::min(settings.eager_max, request.eager_max);
  comm->eager_through_nic_ = settings.eager_through_nic;
  comm->write_timeout_ns_ = int64_t{settings.write_timeout_ms} * 1'000'000;
  if (settings.check_landed) comm->landed_check_.emplace();
  const bool eager = comm->eager_max_ > 0;
  std::string why;
  comm->endpoint_ = Endpoint::open(device.libfabric(), device.info(), device.domain(), &why);
  if (!comm->endpoint_) return fail(ncclSystemError, "accept: %s", why.c_str());
  auto port = device.attach_comm(&why);
  if (!port) return fail(ncclSystemError, "accept: %s", why.c_str());
  comm->posted_ = std::make_unique<Posted>();
  comm->posted_->on = std::move(port);
  const size_t receives = kControlReceives + (eager ? kEagerBounceBuffers : 0);
  comm->posted_->control_in = ControlChannel::open(
      device, *comm->endpoint_, receives, eager ? comm->eager_max_ : kControlBufferSize, 0, &why);
  if (!comm->posted_->control_in || !comm->control_in().post_receives(&why)) {
    return fail(ncclSystemError, "accept: %s", why.c_str());
  }
  comm->bounces_posted_ = receives;
  comm->posted_->control_out = ControlChannel::open_on(device, comm->port(), kControlSends, &why);
  if (!comm->posted_->control_out) return fail(ncclSystemError, "accept: %s", why.c_str());

  comm->control_out().reorder_announcements(settings.reorder_announcements);
  // (The connector's address is its device's shared endpoint: PeerKind says why it stays.)
  if (!comm->port().insert(request.address, &comm->peer_, &why,
                           SharedEndpoint::Port::PeerKind::shared_endpoint)) {
    return fail(ncclRemoteError, "accept: the connector's address is unusable: %s", why.c_str());
  }
  comm->peer_port_ = request.port;
  comm->nonce_ = request.nonce;
  comm->peer_watch_ = PeerWatch::of(request.pid, request.process_space);
  // The connector's connection to this comm's endpoint is accepted in its progress, which
  // takes descriptors (ofi_rxm's socket for it): too few left, and the connection would be
  // dropped by the provider without a word, the ready never coming.  Refused here instead,
  // as this side's want of resources.
  if (const int short_of = descriptors_short(kDescriptorsForAConnection)) {
    return fail(ncclSystemError, "accept: fewer than %d file descriptors left for the "
                "connector's connection (%s)", kDescriptorsForAConnection,
                short_of == EMFILE ? "the process's RLIMIT_NOFILE: raise ulimit -n"
                                   : "the system's file table is full: raise fs.file-max");
  }
  // Port 0: everything for the comm goes to its own endpoint (the address below), whose
  // receive buffers are all its own.
  ConnectAccept accept{request.nonce, comm->endpoint_->address(), 0, static_cast<uint32_t>(getpid()),
                       own_process_space()};
  accept.eager_max = comm->eager_max_;
  accept.eager_credits = eager ? kEagerCreditsPerTag : 0;
  if (!comm->control_out().send(accept, comm->peer_, comm->peer_port_, &why)) {
    // Refused for want of this side's resources (ofi_rxm opens the connection's socket here:
    // a file limit shows now) is the listener's failure; anything else is about the
    // connector's address (ListenComm drops that request and goes on listening).
    const ssize_t code = comm->control_out().last_send_error();
    const bool ours = code == -FI_EMFILE || code == -FI_ENOMEM || code == -FI_ENOSPC ||
                      code == -FI_ENOBUFS || code == -ENFILE;
    return fail(ours ? ncclSystemError : ncclRemoteError, "accept: %s", why.c_str());
  }
  comm->ready_deadline_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->ready_timeout_ms_);
  for (size_t i = 0; i < kMaxRequests; ++i) {
    comm->receives_[i].comm = comm.get();
    comm->receives_[i].slot = static_cast<uint8_t>(i);
    FlushRequest& flush = comm->posted_->flushes[i];
    flush.comm = comm.get();
    flush.read.kind = OperationKind::flush_read;
    flush.read.owner = &flush;
  }
  *out = std::move(comm);
  return ncclSuccess;
}

RecvComm::Posted::~Posted() {
  // Nothing is in flight any more (the endpoint frees a retired comm only then).
  for (EagerCopy& copy : copies) {
    if (copy.spill_mr != nullptr) hmr_mr_close(copy.spill_mr);
  }
}

RecvComm::~RecvComm() {
  endpoint_.reset();  // first: it ends every receive still pointing into our buffers
  // What was posted through the port stays until it ended (an aborted comm's may not have).
  if (posted_) device_->retire_comm(std::move(posted_));
}

ncclResult_t RecvComm::fail_comm(ncclResult_t result, const std::string& reason) {
  if (failure_.empty()) {
    failure_ = reason;
    failure_result_ = result;
    log_warn("recv comm failed: %s", reason.c_str());
  }
  return failure_result_;
}

ncclResult_t RecvComm::poll_accepted(bool* accepted) {
  *accepted = false;
  const ncclResult_t rc = progress();
  // A failed comm is NCCL's (its first irecv reports the failure; dropped, it would leave
  // NCCL's accept waiting for that peer for ever), unless its accept could not be delivered
  // and nothing came from the connector: that one went away before it heard back, and the
  // listener drops it and goes on.  (A connector may have the accept and believe itself
  // connected, or die right after, before this side read the accept's completion: such
  // comms are handed out.)
  if (rc != ncclSuccess) {
    if (accept_undeliverable_) return rc;
    *accepted = true;
    return ncclSuccess;
  }
  if (!connector_ready_) {
    // The connector says ready as soon as the accept reaches it (NCCL calls connect until it
    // returns the comm), so its absence past the deadline (from when the accept was posted)
    // means it went away, or its connection to this comm's endpoint could not be made.  Only
    // once a call found it past already: what came meanwhile is read by this call's progress.
    if (std::chrono::steady_clock::now() > ready_deadline_) {
      if (ready_overdue_) {
        fail_comm(ncclRemoteError, "accept: the connector said no ready within " +
                                       std::to_string(ready_timeout_ms_) +
                                       " ms of the accept (HMR_NCCL_CONNECT_TIMEOUT, else "
                                       "HMR_NCCL_WRITE_TIMEOUT); it may have gone away");
        *accepted = true;
        return ncclSuccess;
      }
      ready_overdue_ = true;
    }
    return ncclSuccess;
  }
  // The accept left (its send completed; start() posted it) and the ready came: the
  // provider's connection to this comm's endpoint is up.
  *accepted = !control_out().busy();
  return ncclSuccess;
}

ncclResult_t RecvComm::progress() {
  if (!failure_.empty()) return failure_result_;
  std::string why;
  if (!control_out().flush(&why)) return fail_comm(ncclSystemError, why);
  // Copies into device memory the provider could not take yet (copies() is empty unless some
  // eager message is on its way into device memory).
  for (auto it = copies().begin(); it != copies().end();) {
    EagerCopy& copy = *it++;  // (a copy that fails moves to the spare ones)
    if (!copy.posted) {
      if (const ncclResult_t rc = post_copy(copy); rc != ncclSuccess) return rc;
    }
  }
  // The shared endpoint's queue only while something of this comm's is on it: reading it
  // takes its lock and, on tcp, the provider's progress (about 1 us a call).  Flush reads and
  // eager copies are waited for by NCCL: at once.  Control messages (an announcement per
  // receive) only need their buffers back: while more wait for one, or when nothing arrived
  // here this time (the comm is waiting anyway), so the read of what arrives is not delayed.
  const bool awaited = !copies().empty() || flush_reads_posted_ != 0;
  if (awaited || control_out().waiting()) {
    if (const ncclResult_t rc = progress_posted(); rc != ncclSuccess) return rc;
  }
  size_t taken = 0;
  if (const ncclResult_t rc = progress_received(&taken); rc != ncclSuccess) return rc;
  if (taken == 0 && !awaited && control_out().busy()) {
    if (const ncclResult_t rc = progress_posted(); rc != ncclSuccess) return rc;
  }
  // Once the sender's messages end, a receive that needs more fails (test()); after an exit
  // the comm fails too, once no early message the sender delivered is left for a receive.
  if (sender_ended_.empty()) look_for_the_senders_end(taken != 0);
  if (sender_exited_ && unexpected_.empty()) return fail_comm(ncclRemoteError, sender_ended_);
  return ncclSuccess;
}

void RecvComm::look_for_the_senders_end(bool arrived) {
  // Exactly, when the sender closed and said how much it delivered: all of it is here.
  if (sender_delivered_ && arrived_ == *sender_delivered_) {
    sender_ended_ = "the sender closed its comm (all " + std::to_string(arrived_) +
                    " of its writes and eager messages arrived)";
    return;
  }
  // Otherwise from its exit, looked at only once what it sent was read (it may exit as soon
  // as its last messages were delivered, a normal end: they must still reach NCCL, found by a
  // review): with nothing more arriving (QuietAfterExit, peer_watch.h; lengthened once its
  // count came, on_message()).
  if (!peer_watch_.gone() || !quiet_after_exit_.settled(arrived)) return;
  sender_exited_ = true;
  sender_ended_ = "the sending process (pid " + std::to_string(peer_watch_.pid()) + ") exited";
  if (sender_delivered_) {
    sender_ended_ += " with " + std::to_string(*sender_delivered_ - arrived_) + " of the " +
                     std::to_string(*sender_delivered_) + " writes and eager messages it said " +
                     "it delivered not arrived after " +
                     std::to_string(std::max(write_timeout_ns_, QuietAfterExit::kTimeNs) / 1'000'000) +
                     " ms";
  }
}

ncclResult_t RecvComm::count_arrival() {
  ++arrived_;
  if (sender_delivered_ && arrived_ > *sender_delivered_) {
    return fail_comm(ncclRemoteError, "the sender's writes and eager messages go on after its "
                     "send_closed said it had delivered " + std::to_string(*sender_delivered_));
  }
  return ncclSuccess;
}

ncclResult_t RecvComm::progress_received(size_t* taken) {
  std::string why;
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = endpoint_->poll(completions, &error);
    if (n == 0) return ncclSuccess;
    if (n < 0) {
      // (Only receives are posted here: one that fails is the connection's end.)
      return fail_comm(ncclRemoteError, "the connection to the sender failed: " + error.reason);
    }
    *taken += static_cast<size_t>(n);
    for (int i = 0; i < n; ++i) {
      const Completion& c = completions[i];
      if (c.flags & (FI_RECV | FI_REMOTE_CQ_DATA)) connector_spoke_ = true;
      if ((c.flags & FI_REMOTE_CQ_DATA) && c.data > UINT32_MAX) {  // (tcp and shm carry 8 bytes)
        return fail_comm(ncclRemoteError, "the sender's write or eager message carried remote CQ "
                                          "data wider than the 32 bits the plugin sends");
      }
      if (c.flags & FI_REMOTE_CQ_DATA) {
        if (const ncclResult_t rc = count_arrival(); rc != ncclSuccess) return rc;
      }
      if ((c.flags & FI_REMOTE_CQ_DATA) && !(c.flags & FI_RECV)) {
        // A remote write's CQ data comes with no operation of ours (its context is whatever
        // the provider left there: shm 1.17 gives 0x1), so it is not looked at.
        if (const ncclResult_t rc = on_write(static_cast<uint32_t>(c.data)); rc != ncclSuccess) return rc;
        continue;
      }
      auto* op = static_cast<Operation*>(c.context);
      if (op == nullptr) continue;
      switch (op->kind) {
        case OperationKind::control_receive: {
          if (c.flags & FI_REMOTE_CQ_DATA) {  // an eager message (net/eager.h)
            if (const ncclResult_t rc = on_eager(*op, c.len, static_cast<uint32_t>(c.data));
                rc != ncclSuccess) {
              return rc;
            }
            break;
          }
          const ncclResult_t rc = on_message(control_in().received(*op, c.len));
          if (!control_in().repost(*op, &why)) return fail_comm(ncclSystemError, why);
          if (rc != ncclSuccess) return rc;
          break;
        }
        case OperationKind::control_send:  // (posted through the port: progress_posted)
        case OperationKind::flush_read:
        case OperationKind::eager_copy:
        case OperationKind::data_write:
        case OperationKind::eager_send: break;
      }
    }
    // A short batch emptied the queue: another read now would only take the provider's locks
    // again (its progress runs on the next call).
    if (n < static_cast<int>(std::size(completions))) return ncclSuccess;
  }
}

ncclResult_t RecvComm::progress_posted() {
  Completion completions[16];
  for (;;) {
    CompletionError error;
    const int n = port().poll(completions, &error);
    if (n < 0) {
      auto* op = static_cast<Operation*>(error.context);
      if (op != nullptr && op->kind == OperationKind::flush_read) {
        --flush_reads_posted_;
        auto* request = static_cast<FlushRequest*>(op->owner);
        request->state = RequestState::failed;
        request->error = fail(ncclSystemError, "iflush's read-back failed: %s", error.reason.c_str());
        continue;
      }
      if (op != nullptr && op->kind == OperationKind::eager_copy) {
        if (const ncclResult_t rc = on_copied(static_cast<EagerCopy&>(*op), false, error.reason);
            rc != ncclSuccess) {
          return rc;
        }
        continue;
      }
      const bool control = op != nullptr && op->kind == OperationKind::control_send;
      if (control) control_out().sent(*op);
      // This side's want of resources (ofi_rxm opens the connection's socket when the first
      // message goes: a file limit shows then) is not the connector's doing.
      const bool ours = error.error == FI_EMFILE || error.error == FI_ENOMEM ||
                        error.error == FI_ENOSPC || error.error == FI_ENOBUFS || error.error == ENFILE;
      // Before the ready, the one control message out is the accept.
      if (control && !ours && !connector_ready_ && !connector_spoke_) accept_undeliverable_ = true;
      // (No operation: the shared endpoint's own failure, which says what it is.)
      return fail_comm(ours ? ncclSystemError : ncclRemoteError,
                       std::string(control ? "a control message to the sender failed: " : "") +
                           error.reason);
    }
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op == nullptr) continue;
      switch (op->kind) {
        case OperationKind::control_send: control_out().sent(*op); break;
        case OperationKind::flush_read:
          --flush_reads_posted_;
          static_cast<FlushRequest*>(op->owner)->state = RequestState::done;
          break;
        case OperationKind::eager_copy:
          if (const ncclResult_t rc = on_copied(static_cast<EagerCopy&>(*op), true, "");
              rc != ncclSuccess) {
            return rc;
          }
          break;
        case OperationKind::control_receive:  // (the shared endpoint's, never a port's)
        case OperationKind::data_write:
        case OperationKind::eager_send: break;
      }
    }
    // Nobody is told this port's id, so no message is addressed to it: any that came is
    // dropped.
    uint8_t message[kControlBufferSize];
    while (port().take_message(message) != 0) {
    }
    if (n < static_cast<int>(std::size(completions))) return ncclSuccess;
  }
}

ReceiveRequest* RecvComm::posted(uint8_t slot, uint8_t index, uint8_t generation,
                                 uint8_t generation_mask) {
  if (slot >= kMaxRequests) return nullptr;
  ReceiveRequest& request = receives_[slot];
  if (request.state != RequestState::pending || (request.generation & generation_mask) != generation ||
      index >= request.count) {
    return nullptr;
  }
  return &request;
}

ncclResult_t RecvComm::on_write(uint32_t data) {
  const WriteCompletion c = decode_write_completion(data);
  ReceiveRequest* request = posted(c.slot, c.index, c.generation, kWriteGenerationMask);
  auto buffer = [&c] {  // (for errors only: no string is made per write)
    return "slot " + std::to_string(c.slot) + " buffer " + std::to_string(c.index) +
           " (generation " + std::to_string(c.generation) + ")";
  };
  if (request == nullptr || ((request->done_mask | request->copying_mask) & (1u << c.index))) {
    return fail_comm(ncclRemoteError, "the sender completed " + buffer() +
                                          ", which is not a posted receive awaiting data");
  }
  // Which parts of the message landed (wire/write_completion.h), in whichever order.
  LandedParts& landed = request->parts[c.index];
  if (const char* broken = take_part(landed, c)) {
    return fail_comm(ncclRemoteError, std::string("the sender wrote ") + broken + " into " + buffer());
  }
  if (landed.bytes > request->posted[c.index]) {
    return fail_comm(ncclRemoteError, "the sender wrote " + std::to_string(landed.bytes) +
                                          " bytes into a " +
                                          std::to_string(request->posted[c.index]) +
                                          "-byte posted buffer");
  }
  if (landed.complete) {
    request->received[c.index] = landed.bytes;
    request->done_mask |= static_cast<uint8_t>(1u << c.index);
  }
  return ncclSuccess;
}

ncclResult_t RecvComm::on_message(std::span<const uint8_t> bytes) {
  std::string why;
  std::optional<ControlMessage> message = decode_control_message(bytes, &why);
  if (!message) return fail_comm(ncclRemoteError, "from the sender: " + why);
  if (const auto* eager = std::get_if<EagerFailure>(&*message)) {
    return fail_comm(ncclRemoteError, "the sender's eager message " + std::to_string(eager->ordinal) +
                                          " of tag " + std::to_string(eager->tag) + " (" +
                                          std::to_string(eager->size) + " bytes) failed on its side: " +
                                          describe(eager->reason));
  }
  if (const auto* ready = std::get_if<ConnectReady>(&*message)) {
    if (connector_ready_ || ready->nonce != nonce_) {
      return fail_comm(ncclRemoteError, "the sender said ready twice, or for another connection");
    }
    connector_ready_ = true;
    return ncclSuccess;
  }
  if (const auto* closed = std::get_if<SendClosed>(&*message)) {
    if (sender_delivered_) return fail_comm(ncclRemoteError, "the sender sent send_closed twice");
    if (closed->delivered < arrived_) {
      return fail_comm(ncclRemoteError, "the sender's send_closed counted " +
                                            std::to_string(closed->delivered) + " writes and eager " +
                                            "messages when " + std::to_string(arrived_) + " had arrived");
    }
    sender_delivered_ = closed->delivered;
    // What the count says is still to come is waited for however late it is, and past the
    // sender's exit for as long as a write may take, never less than the quiet without a
    // count (not for good: a count that cannot be reached must not hold a receive for ever).
    quiet_after_exit_.set_time(std::max(write_timeout_ns_, QuietAfterExit::kTimeNs));
    return ncclSuccess;
  }
  const auto* notice = std::get_if<SendFailure>(&*message);
  if (notice == nullptr) {
    return fail_comm(ncclRemoteError, "the sender sent a message a recv comm never expects");
  }
  ReceiveRequest* request = posted(notice->slot, notice->index, notice->generation, 0xff);
  if (request == nullptr) {
    return fail_comm(ncclRemoteError, "the sender reported a failure for a receive that is not posted");
  }
  request->state = RequestState::failed;
  request->error = fail(ncclRemoteError, "receive of buffer %u (%zu bytes posted) failed on the "
                        "sender's side: %s (message of %llu bytes)", notice->index,
                        request->posted[notice->index], describe(notice->reason),
                        static_cast<unsigned long long>(notice->size));
  return ncclSuccess;
}

ncclResult_t RecvComm::on_eager(Operation& bounce, size_t len, uint32_t data) {
  --bounces_posted_;
  if (eager_max_ == 0) {
    return fail_comm(ncclRemoteError, "the sender sent an eager message on a comm without them");
  }
  EagerAddress a = decode_eager_address(data);
  const Stream* known = streams_.find(a.tag);
  a.ordinal = restore_ordinal(a.ordinal, known != nullptr ? known->next_ordinal : 0);
  size_t index = 0;
  if (ReceiveRequest* request = posted_for(a, &index)) {
    return deliver_eager(*request, index, EagerPayload{&bounce, {}, len});
  }
  // Not posted yet, unless it was posted and filled already (a duplicate: a broken peer).
  // An honest sender is less than its credits ahead of the receiver's postings (every
  // buffer between was sent eagerly and not consumed), and holds at most its credits of
  // each tag, of a bounded number of tags, here.
  if (unexpected_.size() - free_unexpected_.size() >= kMaxEarlyMessages) {
    return fail_comm(ncclRemoteError, "the sender sent more than " + std::to_string(kMaxEarlyMessages) +
                                          " eager messages ahead of their receives, over all tags");
  }
  Stream& stream = streams_.at(a.tag);
  uint16_t& early_at = stream.early_at[a.ordinal % kPostedBuffers];
  if (ordinal_before(a.ordinal, stream.next_ordinal) || early_at != 0) {
    return fail_comm(ncclRemoteError, "the sender sent eager message " + std::to_string(a.ordinal) +
                                          " of tag " + std::to_string(a.tag) +
                                          ", whose buffer is filled already or has one waiting");
  }
  if (a.ordinal - stream.next_ordinal >= kEagerCreditsPerTag) {
    return fail_comm(ncclRemoteError, "the sender sent eager message " + std::to_string(a.ordinal) +
                                          " of tag " + std::to_string(a.tag) + ", more than its " +
                                          std::to_string(kEagerCreditsPerTag) + " credits ahead of buffer " +
                                          std::to_string(stream.next_ordinal));
  }
  if (++stream.early > kEagerCreditsPerTag) {
    return fail_comm(ncclRemoteError, "the sender sent more than " +
                                          std::to_string(kEagerCreditsPerTag) +
                                          " eager messages of tag " + std::to_string(a.tag) +
                                          " ahead of their receives (its credits)");
  }
  Unexpected early{a, EagerPayload{&bounce, {}, len}};
  if (bounces_posted_ < kEagerBounceReserve) {
    // Few bounce buffers left: this one goes back now and the bytes wait on the heap, so a
    // sender that is ahead cannot take the buffers another sender's message needs.
    const uint8_t* bytes = control_in().received(bounce, len).data();
    early.payload.spill.assign(bytes, bytes + len);
    early.payload.bounce = nullptr;
    std::string why;
    if (!control_in().repost(bounce, &why)) return fail_comm(ncclSystemError, why);
    ++bounces_posted_;
  }
  if (free_unexpected_.empty()) {
    free_unexpected_.push_back(static_cast<uint16_t>(unexpected_.size()));
    unexpected_.emplace_back();
  }
  const uint16_t at = free_unexpected_.back();
  free_unexpected_.pop_back();
  unexpected_[at] = std::move(early);
  early_at = static_cast<uint16_t>(at + 1);
  return ncclSuccess;
}

std::optional<RecvComm::EagerPayload> RecvComm::take_early(Stream& stream, const EagerAddress& address) {
  uint16_t& early_at = stream.early_at[address.ordinal % kPostedBuffers];
  if (early_at == 0) return std::nullopt;
  Unexpected& early = unexpected_[early_at - 1u];
  if (early.address.tag != address.tag || early.address.ordinal != address.ordinal) return std::nullopt;
  free_unexpected_.push_back(static_cast<uint16_t>(early_at - 1u));
  early_at = 0;
  --stream.early;
  return std::move(early.payload);
}

ReceiveRequest* RecvComm::posted_for(const EagerAddress& address, size_t* index) {
  Stream* stream = streams_.find(address.tag);
  if (stream == nullptr) return nullptr;
  const uint16_t at = stream->posted_at[address.ordinal % kPostedBuffers];
  if (at == 0) return nullptr;
  ReceiveRequest& request = receives_[(at - 1u) / kMaxRecvs];
  const size_t i = (at - 1u) % kMaxRecvs;
  if (request.state != RequestState::pending || i >= request.count ||
      request.address[i].tag != address.tag || request.address[i].ordinal != address.ordinal ||
      ((request.done_mask | request.copying_mask) & (1u << i)) || request.parts[i].seen != 0) {
    return nullptr;
  }
  *index = i;
  return &request;
}

ncclResult_t RecvComm::deliver_eager(ReceiveRequest& request, size_t index, EagerPayload payload) {
  const int32_t tag = request.address[index].tag;
  const size_t len = payload.len;
  if (len > request.posted[index]) {
    request.state = RequestState::failed;
    request.error = fail(ncclInvalidUsage, "receive of buffer %zu (%zu bytes posted): the sender "
                         "sent %zu bytes", index, request.posted[index], len);
    return consumed(payload, tag);
  }
  const MemoryHandle& mh = *request.mhandle[index];
  if (len == 0 || (!mh.needs_flush && !eager_through_nic_)) {
    if (len != 0) std::memcpy(request.data[index], bytes_of(payload), len);
    request.received[index] = len;
    request.done_mask |= static_cast<uint8_t>(1u << index);
    return consumed(payload, tag);
  }
  // Device memory: the CPU cannot copy into it, the NIC can.
  std::list<EagerCopy>& spare = posted_->spare_copies;
  if (spare.empty()) spare.emplace_back();
  copies().splice(copies().end(), spare, spare.begin());
  EagerCopy& copy = copies().back();
  copy.kind = OperationKind::eager_copy;
  copy.owner = this;
  copy.request = &request;
  copy.index = index;
  copy.tag = tag;
  copy.payload = std::move(payload);
  copy.spill_mr = nullptr;
  copy.posted = false;
  request.copying_mask |= static_cast<uint8_t>(1u << index);
  if (copy.payload.bounce == nullptr &&
      hmr_mr_reg(device_->registrations(), copy.payload.spill.data(), len, HMR_WRITE, 0, 0, 0,
                 &copy.spill_mr, nullptr) != 0) {
    return on_copied(copy, false, std::string("registering the spilled message: ") + hmr_last_error());
  }
  return post_copy(copy);
}

const uint8_t* RecvComm::bytes_of(const EagerPayload& payload) const {
  return payload.bounce != nullptr ? control_in().received(*payload.bounce, payload.len).data()
                                   : payload.spill.data();
}

ncclResult_t RecvComm::post_copy(EagerCopy& copy) {
  std::string why;
  if (self_ == FI_ADDR_UNSPEC &&
      !port().insert(port().address(), &self_, &why, SharedEndpoint::Port::PeerKind::shared_endpoint)) {
    return on_copied(copy, false, why);
  }
  ReceiveRequest& request = *copy.request;
  const MemoryHandle& mh = *request.mhandle[copy.index];
  const EagerPayload& p = copy.payload;
  void* desc = p.bounce != nullptr ? control_in().desc() : hmr_mr_desc(copy.spill_mr);
  const ssize_t rc = port().write(bytes_of(p), p.len, desc, self_,
                                  mh.rma_address(request.data[copy.index]), mh.key, &copy);
  if (rc == -FI_EAGAIN) return ncclSuccess;  // the next progress posts it
  if (rc != 0) return on_copied(copy, false, "fi_write: " + device_->libfabric().describe(rc));
  copy.posted = true;
  return ncclSuccess;
}

ncclResult_t RecvComm::on_copied(EagerCopy& copy, bool ok, const std::string& reason) {
  ReceiveRequest& request = *copy.request;
  const uint8_t bit = static_cast<uint8_t>(1u << copy.index);
  request.copying_mask &= static_cast<uint8_t>(~bit);
  if (ok) {
    request.received[copy.index] = copy.payload.len;
    request.done_mask |= bit;
  } else if (request.state == RequestState::pending) {
    request.state = RequestState::failed;
    request.error = fail(ncclSystemError, "moving an eager message of %zu bytes into buffer %zu "
                         "through the NIC failed: %s", copy.payload.len, copy.index, reason.c_str());
  }
  if (copy.spill_mr != nullptr) hmr_mr_close(copy.spill_mr);
  copy.spill_mr = nullptr;
  const ncclResult_t rc = consumed(copy.payload, copy.tag);
  copy.payload.spill.clear();
  auto it = std::find_if(copies().begin(), copies().end(), [&](const EagerCopy& c) { return &c == &copy; });
  posted_->spare_copies.splice(posted_->spare_copies.end(), copies(), it);
  return rc;
}

ncclResult_t RecvComm::consumed(EagerPayload& payload, int32_t tag) {
  std::string why;
  if (payload.bounce != nullptr) {
    if (!control_in().repost(*payload.bounce, &why)) return fail_comm(ncclSystemError, why);
    payload.bounce = nullptr;
    ++bounces_posted_;
  }
  Stream& stream = streams_.at(tag);
  ++stream.consumed;
  if (stream.consumed - stream.reported < kEagerCreditsPerTag / 2) return ncclSuccess;
  EagerCredit credit;
  credit.count = 1;
  credit.tags[0] = TagCredit{tag, stream.consumed};
  stream.reported = stream.consumed;
  if (!control_out().send(credit, peer_, peer_port_, &why)) return fail_comm(ncclSystemError, why);
  return ncclSuccess;
}

bool RecvComm::eager_only(size_t size, const MemoryHandle& mhandle, int32_t tag) const {
  return eager_max_ != 0 && size <= eager_max_ && !mhandle.needs_flush && eager_tag(tag);
}

ncclResult_t RecvComm::announce(ReceiveRequest& request) {
  ReceiveAnnouncement announcement;
  announcement.slot = request.slot;
  announcement.generation = request.generation;
  announcement.count = request.count;
  for (size_t i = 0; i < request.count; ++i) {
    const MemoryHandle& mh = *request.mhandle[i];
    announcement.buffers[i] = AnnouncedBuffer{mh.rma_address(request.data[i]), request.posted[i],
                                              mh.key, request.address[i].tag,
                                              request.address[i].ordinal};
  }
  request.announced = true;
  std::string why;
  if (!control_out().send(announcement, peer_, peer_port_, &why)) return fail_comm(ncclSystemError, why);
  return ncclSuccess;
}

ncclResult_t RecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags,
                             MemoryHandle* const* mhandles, void** request) {
  *request = nullptr;
  if (!failure_.empty()) {
    return fail(failure_result_, "irecv on a recv comm that failed earlier: %s", failure_.c_str());
  }
  if (n < 1 || static_cast<size_t>(n) > kMaxRecvs) {
    return fail(ncclInvalidArgument, "irecv of %d buffers: between 1 and %zu (maxRecvs)", n, kMaxRecvs);
  }
  for (int i = 0; i < n; ++i) {
    const MemoryHandle* mh = mhandles[i];
    if (sizes[i] > kMaxMessageSize) {
      return fail(ncclInvalidArgument, "irecv buffer %d of %zu bytes: over maxP2pBytes", i, sizes[i]);
    }
    if (mh == nullptr || mh->device != device_ || !mh->contains(data[i], sizes[i])) {
      return fail(ncclInvalidArgument, "irecv buffer %d (%zu bytes at %p) is not inside a memory "
                  "handle registered on this device", i, sizes[i], data[i]);
    }
  }
  // No progress here: slots are freed by test(), failures found by test()'s progress, and
  // an announcement that finds no free send buffer goes out with the next progress.
  ReceiveRequest* slot = nullptr;
  for (ReceiveRequest& candidate : receives_) {
    // (Not one whose failed receive still has an eager copy in flight: its end would mark
    // the new receive's buffer.)
    if (candidate.state == RequestState::idle && candidate.copying_mask == 0) {
      slot = &candidate;
      break;
    }
  }
  if (slot == nullptr) {
    // All NCCL_NET_MAX_REQUESTS in use (NCCL retries), or some idle only until their eager
    // copies end, which only progress reads: a caller that tests nothing else must not wait
    // for ever.
    for (const ReceiveRequest& r : receives_) {
      if (r.state == RequestState::idle) return progress();
    }
    return ncclSuccess;
  }
  if (landed_check_) check_untouched_since_received(n, data, sizes, tags, mhandles);
  ++slot->generation;  // a late completion for the slot's previous receive cannot match
  slot->count = static_cast<uint8_t>(n);
  slot->done_mask = 0;
  slot->copying_mask = 0;
  slot->pending_tests = 0;
  slot->state = RequestState::pending;
  slot->error = ncclSuccess;
  bool announce_now = false;
  for (int i = 0; i < n; ++i) {
    slot->posted[i] = sizes[i];
    slot->received[i] = 0;
    slot->parts[i] = LandedParts{};
    slot->data[i] = data[i];
    slot->mhandle[i] = mhandles[i];
    Stream& stream = streams_.at(tags[i]);
    slot->address[i] = EagerAddress{tags[i], stream.next_ordinal++};
    stream.posted_at[slot->address[i].ordinal % kPostedBuffers] =
        static_cast<uint16_t>(slot->slot * kMaxRecvs + static_cast<size_t>(i) + 1);
    if (!eager_only(sizes[i], *mhandles[i], tags[i])) announce_now = true;
  }
  // Eager messages that came before this receive.
  if (!unexpected_.empty()) {
    for (size_t i = 0; i < slot->count; ++i) {
      std::optional<EagerPayload> early = take_early(streams_.at(slot->address[i].tag), slot->address[i]);
      if (!early) continue;
      if (const ncclResult_t rc = deliver_eager(*slot, i, std::move(*early)); rc != ncclSuccess) {
        slot->state = RequestState::idle;
        return rc;
      }
    }
  }
  slot->announced = false;
  if (announce_now && slot->done_mask != (1u << n) - 1) {
    if (const ncclResult_t rc = announce(*slot); rc != ncclSuccess) {
      slot->state = RequestState::idle;
      return rc;
    }
  }
  *request = slot;
  return ncclSuccess;
}

void RecvComm::check_untouched_since_received(int n, void* const* data, const size_t* sizes,
                                              const int* tags, MemoryHandle* const* mhandles) {
  for (int i = 0; i < n; ++i) {
    if (!mhandles[i]->host_memory) continue;
    if (std::optional<std::string> changed = landed_check_->posting_again(data[i], sizes[i])) {
      log_warn("HMR_NCCL_CHECK_LANDED: %s, before a receive into %p (tag %d) was posted over "
               "it: bytes that landed after their completion was reported, or a writer besides "
               "the sender", changed->c_str(), data[i], tags[i]);
    }
  }
}

ncclResult_t RecvComm::iflush(int n, void** data, const int* sizes, MemoryHandle* const* mhandles,
                              void** request) {
  *request = nullptr;
  if (!failure_.empty()) {
    return fail(failure_result_, "iflush on a recv comm that failed earlier: %s", failure_.c_str());
  }
  if (n < 1 || static_cast<size_t>(n) > kMaxRecvs) {
    return fail(ncclInvalidArgument, "iflush of %d buffers: between 1 and %zu", n, kMaxRecvs);
  }
  // The last buffer that received bytes the NIC wrote directly (device memory), or any with
  // HMR_NCCL_TEST_FLUSH_HOST_MEMORY: a read through the NIC after the writes makes them visible to the GPU.
  int last = -1;
  for (int i = 0; i < n; ++i) {
    const MemoryHandle* mh = mhandles[i];
    if (sizes[i] <= 0 || mh == nullptr || !(mh->needs_flush || flush_host_memory_)) continue;
    if (mh->device != device_ || !mh->contains(data[i], 1)) {
      return fail(ncclInvalidArgument, "iflush buffer %d at %p is not inside its memory handle", i, data[i]);
    }
    last = i;
  }
  if (last < 0) return ncclSuccess;  // host memory: nothing to flush, no request
  std::string why;
  if (self_ == FI_ADDR_UNSPEC &&
      !port().insert(port().address(), &self_, &why, SharedEndpoint::Port::PeerKind::shared_endpoint)) {
    return fail(ncclSystemError, "iflush: %s", why.c_str());
  }
  FlushRequest* slot = nullptr;
  for (FlushRequest& candidate : posted_->flushes) {
    if (candidate.state == RequestState::idle) {
      slot = &candidate;
      break;
    }
  }
  if (slot == nullptr) {
    // No request would read as "flushed" to NCCL: refuse instead, loudly.
    return fail(ncclInternalError, "iflush: all %zu flush requests of this comm are in flight "
                "(more than NCCL_NET_MAX_REQUESTS); test them first", posted_->flushes.size());
  }
  const MemoryHandle* mh = mhandles[last];
  slot->address = mh->rma_address(data[last]);
  slot->key = mh->key;
  slot->read_posted = false;
  slot->eagain_left = flush_eagain_;
  slot->state = RequestState::pending;
  slot->error = ncclSuccess;
  post_flush(*slot);
  if (slot->state == RequestState::failed) {
    slot->state = RequestState::idle;
    return slot->error;
  }
  *request = slot;
  return ncclSuccess;
}

bool RecvComm::post_flush(FlushRequest& request) {
  ssize_t rc = -FI_EAGAIN;
  if (request.eagain_left > 0) {
    --request.eagain_left;
  } else {
    rc = port().read(control_out().scratch(), 1, control_out().desc(), self_, request.address,
                     request.key, &request.read);
  }
  if (rc == -FI_EAGAIN) return false;
  if (rc != 0) {
    request.state = RequestState::failed;
    request.error = fail(ncclSystemError, "iflush: fi_read failed: %s",
                         device_->libfabric().describe(rc).c_str());
    return true;
  }
  request.read_posted = true;
  ++flush_reads_posted_;
  return true;
}

std::vector<const void*> RecvComm::request_addresses() const {
  std::vector<const void*> out;
  out.reserve(receives_.size() + posted_->flushes.size());
  for (const ReceiveRequest& request : receives_) out.push_back(&request);
  for (const FlushRequest& request : posted_->flushes) out.push_back(&request);
  return out;
}

ncclResult_t RecvComm::test(ReceiveRequest* request, int* done, int* sizes) {
  if (done != nullptr) *done = 0;
  const uint32_t all = (1u << request->count) - 1;
  // Complete already (irecv took early messages): done, whatever became of the comm since.
  if (request->state == RequestState::pending && request->done_mask == all) {
    request->state = RequestState::done;
  }
  if (request->state == RequestState::pending) {
    const ncclResult_t rc = progress();
    if (rc != ncclSuccess) {
      request->state = RequestState::idle;
      return rc;
    }
    if (request->state == RequestState::pending && request->done_mask != all &&
        !sender_ended_.empty() &&
        (request->done_mask | request->copying_mask) != all) {
      // (The sender's messages ended with early messages of other receives still here: those
      // are delivered, this one can never complete.)
      request->state = RequestState::idle;
      return fail(ncclRemoteError, "%s before this receive's message came", sender_ended_.c_str());
    }
    if (request->done_mask == all) {
      request->state = RequestState::done;
    } else if (!request->announced && ++request->pending_tests == kTestsBeforeLateAnnouncement) {
      if (const ncclResult_t announced = announce(*request); announced != ncclSuccess) {
        request->state = RequestState::idle;
        return announced;
      }
    }
  }
  if (request->state == RequestState::failed) {
    request->state = RequestState::idle;
    return request->error;
  }
  if (request->state != RequestState::done) return ncclSuccess;
  if (done != nullptr) *done = 1;
  if (sizes != nullptr) {
    for (size_t i = 0; i < request->count; ++i) {
      sizes[i] = request->received[i] > INT_MAX ? INT_MAX : static_cast<int>(request->received[i]);
    }
  }
  if (landed_check_) {
    for (size_t i = 0; i < request->count; ++i) {
      if (!request->mhandle[i]->host_memory) continue;
      landed_check_->received(request->data[i], request->received[i]);
      log_info("%s", message_checksum_line("received", nonce_, request->address[i].tag,
                                           request->address[i].ordinal, request->received[i],
                                           message_checksum(request->data[i],
                                                            request->received[i])).c_str());
    }
  }
  request->state = RequestState::idle;
  return ncclSuccess;
}

ncclResult_t RecvComm::test(FlushRequest* request, int* done) {
  if (done != nullptr) *done = 0;
  // A failed comm posts nothing more, and a read still posted keeps its request: the provider
  // may yet write its completion into it, so it is never handed out again.
  if (!failure_.empty() && request->state == RequestState::pending) {
    if (!request->read_posted) request->state = RequestState::idle;
    return failure_result_;
  }
  if (request->state == RequestState::pending && !request->read_posted) {
    post_flush(*request);
    // Still not taken (the provider was busy): its progress, the shared endpoint's, frees
    // what it lacked, and nothing else of this comm's may be there to call for it.
    if (request->state == RequestState::pending && !request->read_posted) {
      if (const ncclResult_t rc = progress_posted(); rc != ncclSuccess) {
        request->state = RequestState::idle;  // (never posted: nothing will write into it)
        return rc;
      }
    }
  }
  if (request->state == RequestState::pending) {
    if (const ncclResult_t rc = progress(); rc != ncclSuccess) {
      if (!request->read_posted) request->state = RequestState::idle;
      return rc;
    }
  }
  if (request->state == RequestState::failed) {
    request->state = RequestState::idle;
    return request->error;
  }
  if (request->state != RequestState::done) return ncclSuccess;
  if (done != nullptr) *done = 1;
  request->state = RequestState::idle;
  return ncclSuccess;
}

}  // namespace hmr::nccl
