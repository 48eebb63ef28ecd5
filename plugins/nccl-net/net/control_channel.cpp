#include "control_channel.h"

#include <hmr/hmr.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "device.h"

namespace hmr::nccl {

std::unique_ptr<ControlChannel> ControlChannel::open(Device& device, Endpoint& endpoint,
                                                     size_t receives, size_t receive_size,
                                                     size_t sends, std::string* why) {
  return make(device, std::unique_ptr<ControlChannel>(new ControlChannel(&endpoint, nullptr)),
              receives, receive_size, sends, why);
}

std::unique_ptr<ControlChannel> ControlChannel::open_on(Device& device, SharedEndpoint::Port& port,
                                                        size_t sends, std::string* why) {
  return make(device, std::unique_ptr<ControlChannel>(new ControlChannel(nullptr, &port)), 0,
              kControlBufferSize, sends, why);
}

std::unique_ptr<ControlChannel> ControlChannel::make(Device& device,
                                                     std::unique_ptr<ControlChannel> channel,
                                                     size_t receives, size_t receive_size,
                                                     size_t sends, std::string* why) {
  const size_t count = receives + sends;
  if (receive_size < kControlBufferSize) receive_size = kControlBufferSize;
  const size_t bytes =
      (receives * receive_size + (sends + 1) * kControlBufferSize + 4095) / 4096 * 4096;  // + scratch
  channel->memory_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  if (channel->memory_ == nullptr) {
    *why = "cannot allocate " + std::to_string(bytes) + " bytes of control buffers";
    return nullptr;
  }
  // Registered like any buffer, so providers that want descriptors for local buffers
  // (FI_MR_LOCAL) get hmr's; one registration for all of a comm's control buffers.  Besides
  // sends and receives, a bounce buffer is the source of an eager copy's RMA write and the
  // scratch buffer the target of iflush's RMA read (FI_WRITE, FI_READ).
  const int rc = hmr_mr_reg(device.registrations(), channel->memory_, bytes,
                            HMR_SEND | HMR_RECV | HMR_READ | HMR_WRITE, 0, 0, 0, &channel->mr_,
                            nullptr);
  if (rc != 0) {
    *why = std::string("hmr_mr_reg of the control buffers: ") + hmr_strerror(rc) + " (" +
           hmr_last_error() + ")";
    return nullptr;
  }
  channel->desc_ = hmr_mr_desc(channel->mr_);
  channel->receives_ = receives;
  channel->receive_size_ = receive_size;
  channel->slots_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    Operation& op = channel->slots_[i];
    op.kind = i < receives ? OperationKind::control_receive : OperationKind::control_send;
    op.owner = channel.get();
    op.index = static_cast<uint32_t>(i);
    if (i >= receives) channel->free_sends_.push_back(static_cast<uint32_t>(i));
  }
  return channel;
}

ControlChannel::~ControlChannel() {
  // The endpoint is closed before this (its owner's order), so no operation still uses a buffer.
  if (mr_ != nullptr) hmr_mr_close(mr_);
  std::free(memory_);
}

bool ControlChannel::post_receives(std::string* why) {
  for (size_t i = 0; i < receives_; ++i) {
    if (!repost(slots_[i], why)) return false;
  }
  return true;
}

bool ControlChannel::repost(Operation& op, std::string* why) {
  // A comm's receive queue is sized for every buffer it posts, so EAGAIN here is a fault too.
  return try_repost(op, why) == 0;
}

ssize_t ControlChannel::try_repost(Operation& op, std::string* why) {
  const ssize_t rc = endpoint_->post_receive(buffer(op.index), receive_size_, desc_, &op);
  if (rc != 0) *why = "posting a control receive buffer failed: " + libfabric().describe(rc);
  return rc;
}

bool ControlChannel::send(const ControlMessage& message, fi_addr_t peer, uint64_t peer_port,
                          std::string* why) {
  // The common case, once per receive: nothing queued ahead and a send buffer free, so the
  // message is encoded straight into that registered buffer and posted (no allocation, no
  // copy); it joins the queue only when the provider is busy.
  if (!reorder_ && queued_.empty() && !free_sends_.empty()) {
    uint8_t* const into = buffer(free_sends_.back());
    const size_t size = encode_into(message, peer_port, {into, kControlBufferSize});
    if (size != 0) {
      const ssize_t rc = post_free_buffer(size, peer, why);
      if (rc != -FI_EAGAIN) return rc == 0;
      // (Already encoded: the queue takes these bytes, and flush() tries again.)
      queued_.push_back(Queued{std::vector<uint8_t>(into, into + size), peer});
      return flush(why);
    }
  }
  std::vector<uint8_t> bytes = encode(message, peer_port);
  if (bytes.size() > kControlBufferSize) {
    *why = "a control message of " + std::to_string(bytes.size()) + " bytes does not fit a buffer";
    return false;
  }
  if (reorder_ && (std::holds_alternative<ReceiveAnnouncement>(message) ||
                   std::holds_alternative<EagerCredit>(message))) {
    if (!held_) {
      held_ = Queued{std::move(bytes), peer};
      held_flushes_ = 0;
      return true;
    }
    queued_.push_back(Queued{std::move(bytes), peer});  // this one first, then the held one
    queued_.push_back(std::move(*held_));
    held_.reset();
    return flush(why);
  }
  queued_.push_back(Queued{std::move(bytes), peer});
  return flush(why);
}

ssize_t ControlChannel::send_now(const ControlMessage& message, fi_addr_t peer, uint64_t peer_port,
                                 std::string* why) {
  if (!queued_.empty() || held_ || free_sends_.empty()) return -FI_EAGAIN;
  const size_t size = encode_into(message, peer_port, {buffer(free_sends_.back()), kControlBufferSize});
  if (size == 0) {
    *why = "a control message does not fit a buffer";
    return -FI_EINVAL;
  }
  return post_free_buffer(size, peer, why);
}

ssize_t ControlChannel::post_free_buffer(size_t size, fi_addr_t peer, std::string* why) {
  const uint32_t index = free_sends_.back();
  const ssize_t rc = port_ != nullptr ? port_->send(buffer(index), size, desc_, peer, &slots_[index])
                                      : endpoint_->send(buffer(index), size, desc_, peer, &slots_[index]);
  if (rc == 0) {
    free_sends_.pop_back();
    ++sends_in_flight_;
  } else if (rc != -FI_EAGAIN) {
    last_send_error_ = rc;
    *why = "sending a control message failed: " + libfabric().describe(rc);
  }
  return rc;
}

bool ControlChannel::flush(std::string* why) {
  if (held_ && ++held_flushes_ >= 2) {  // no announcement followed it: let it go
    queued_.push_back(std::move(*held_));
    held_.reset();
  }
  while (!queued_.empty() && !free_sends_.empty()) {
    const Queued& next = queued_.front();
    std::memcpy(buffer(free_sends_.back()), next.bytes.data(), next.bytes.size());
    const ssize_t rc = post_free_buffer(next.bytes.size(), next.peer, why);
    if (rc == -FI_EAGAIN) return true;  // the provider is busy: the next progress retries
    if (rc != 0) return false;
    queued_.pop_front();
  }
  return true;
}

std::span<const uint8_t> ControlChannel::received(const Operation& op, size_t len) const {
  return std::span<const uint8_t>(buffer(op.index), len < receive_size_ ? len : receive_size_);
}

void ControlChannel::sent(const Operation& op) {
  free_sends_.push_back(op.index);
  --sends_in_flight_;
}

}  // namespace hmr::nccl
