// A comm's control messages (connection set-up, receive announcements, send failures, eager
// credits): a few small buffers registered once through hmr, receive buffers kept posted, and
// sends that queue when the provider or the buffers are busy and go out on the next progress.
// A send comm's channel has send buffers only and posts through its port on the device's
// shared endpoint (net/shared_endpoint.h), whose own channel has the receive buffers.
// A recv comm's receive buffers also take the sender's eager messages (net/eager.h), so they
// are as large as the eager max, and one may be held (not reposted) until its receive is posted.
#pragma once

#include <hmr/hmr.h>
#include <rdma/fabric.h>

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../wire/control_message.h"
#include "operation.h"
#include "shared_endpoint.h"

namespace hmr::nccl {

class Device;

class ControlChannel {
 public:
  // `receive_size`: bytes per receive buffer (at least kControlBufferSize).
  static std::unique_ptr<ControlChannel> open(Device& device, Endpoint& endpoint,
                                              size_t receives, size_t receive_size, size_t sends,
                                              std::string* why);
  // `sends` buffers posted through `port`, and no receive buffers.
  static std::unique_ptr<ControlChannel> open_on(Device& device, SharedEndpoint::Port& port,
                                                 size_t sends, std::string* why);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Posts every receive buffer (once, after open).
  bool post_receives(std::string* why);
  // Sends `message` to the comm on port `peer_port` of `peer` now, or queues it for flush().
  bool send(const ControlMessage& message, fi_addr_t peer, uint64_t peer_port, std::string* why);
  // Sends `message` now or not at all (never queued): 0 once posted, -FI_EAGAIN when a
  // message is queued ahead, no buffer is free or the provider is busy, or the provider's
  // failure (described in `why`).  For a message worth nothing later (net/send_comm.h).
  ssize_t send_now(const ControlMessage& message, fi_addr_t peer, uint64_t peer_port,
                   std::string* why);
  // Posts queued sends while buffers and the provider allow.
  bool flush(std::string* why);
  // The provider's code of the last send it refused (a negative FI_E*), 0 before any: what
  // tells this side's want of resources from a peer's bad address.
  ssize_t last_send_error() const { return last_send_error_; }
  // Sends queued or not yet completed.
  bool busy() const { return !queued_.empty() || held_.has_value() || sends_in_flight_ != 0; }
  // Sends queued (waiting for a free buffer or the provider), not posted yet.
  bool waiting() const { return !queued_.empty() || held_.has_value(); }
  // Fault injection for tests (HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS): each receive
  // announcement or eager credit is held back until the next one has gone out, or for two
  // flushes when none follows, so a peer sees them in another order than they were sent.
  void reorder_announcements(bool on) { reorder_ = on; }

  // For a completed control_receive operation: the bytes received, and then its repost.
  std::span<const uint8_t> received(const Operation& op, size_t len) const;
  size_t receive_size() const { return receive_size_; }
  bool repost(Operation& op, std::string* why);
  // The same, with the provider's code (0, -FI_EAGAIN, or a failure described in `why`).
  ssize_t try_repost(Operation& op, std::string* why);
  // For a completed (or failed) control_send operation.
  void sent(const Operation& op);
  // A registered buffer of kControlBufferSize bytes no message uses (iflush reads into it).
  void* scratch() const { return buffer(slots_.size()); }
  void* desc() const { return desc_; }

 private:
  ControlChannel(Endpoint* endpoint, SharedEndpoint::Port* port) : endpoint_(endpoint), port_(port) {}
  static std::unique_ptr<ControlChannel> make(Device& device, std::unique_ptr<ControlChannel> channel,
                                              size_t receives, size_t receive_size, size_t sends,
                                              std::string* why);
  const Libfabric& libfabric() const { return port_ != nullptr ? port_->libfabric() : endpoint_->libfabric(); }
  uint8_t* buffer(size_t index) const {
    return index < receives_ ? memory_ + index * receive_size_
                             : memory_ + receives_ * receive_size_ + (index - receives_) * kControlBufferSize;
  }
  // Sends the first `size` bytes of the last free send buffer to `peer`: 0 (the buffer is
  // then in flight), -FI_EAGAIN (it stays free), or another failure, described in `why`.
  ssize_t post_free_buffer(size_t size, fi_addr_t peer, std::string* why);

  struct Queued {
    std::vector<uint8_t> bytes;
    fi_addr_t peer;
  };

  Endpoint* endpoint_;            // an endpoint of the comm's own, or
  SharedEndpoint::Port* port_;    // its port on the device's shared endpoint (sends only)
  uint8_t* memory_ = nullptr;
  hmr_mr* mr_ = nullptr;
  void* desc_ = nullptr;
  size_t receives_ = 0;
  size_t receive_size_ = kControlBufferSize;
  std::vector<Operation> slots_;       // receives first, then sends
  std::vector<uint32_t> free_sends_;   // indices of idle send slots
  std::deque<Queued> queued_;
  size_t sends_in_flight_ = 0;
  ssize_t last_send_error_ = 0;
  bool reorder_ = false;
  std::optional<Queued> held_;  // the announcement or credit held back (reorder_ only)
  int held_flushes_ = 0;        // flushes since it was held
};

}  // namespace hmr::nccl
