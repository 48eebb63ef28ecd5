// The sending end of a connection, from connect() on: first it connects (sends the listener a
// connect request and waits for the new recv comm's accept, under a deadline), then it moves
// messages.  The k-th isend of tag t fills the receiver's k-th posted buffer of tag t.  A
// message moves as on NCCL's IB transport when that buffer's announcement (address, size, hmr
// key, tag, ordinal) is here: an RMA write into it with remote CQ data saying which buffer and
// how many bytes.  A message of up to the eager max goes without waiting for it (net/eager.h).
// Otherwise isend returns no request and NCCL asks again.  Announcements are kept by the
// receiver's slot, so the order the fabric delivers them in does not matter.
// Every send comm of a device posts on the device's one shared endpoint, through a port of its
// own (net/shared_endpoint.h): the receiver addresses its messages to that port.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "peer_watch.h"
#include "../wire/control_message.h"
#include "../wire/listen_handle.h"
#include "control_channel.h"
#include "request.h"
#include "shared_endpoint.h"
#include "tag_streams.h"

namespace hmr::nccl {

class Device;
struct MemoryHandle;

class SendComm {
 public:
  // Starts connecting to the listener `handle` describes, with the device's settings
  // (connect and write timeouts, eager max).
  static ncclResult_t start(Device& device, const ListenHandle& handle,
                            std::unique_ptr<SendComm>* out);
  ~SendComm();

  // Progresses the connection: true once connected; an error when it failed or timed out.
  ncclResult_t poll_connected(bool* connected);

  ncclResult_t isend(void* data, size_t size, int tag, MemoryHandle* mhandle, void** request);
  ncclResult_t test(SendRequest* request, int* done, int* size);
  // closeSend: tells the receiver where this comm's messages end (send_closed, once no write
  // or eager message is in flight) and lets queued control messages (that, a failure notice)
  // go out, for a short while; from then on no byte of NCCL's buffers is posted (a held eager
  // send, a tail the provider refused with -FI_EAGAIN): NCCL freed them before closing the comm.
  void drain();
  Device& device() const { return *device_; }
  // Where each request it can hand out lives, for test() to tell one of them from a pointer
  // that is stale (its comm closed) or foreign before it reads anything through it.
  std::vector<const void*> request_addresses() const;

 private:
  // Tests that wait for the connect request to leave (tests/nccl-net/accept_race_test.cpp).
  friend struct SendCommProbe;
  struct Announcement {
    ReceiveAnnouncement message;
    uint8_t used_mask = 0;  // buffers filled (by RMA, eagerly, or refused)
  };
  struct Stream {
    int32_t tag = 0;
    uint32_t next_ordinal = 0;   // the buffer of this tag the next isend fills
    uint32_t eager_sent = 0;     // eager messages sent (a running count, wrapping)
    uint32_t eager_consumed = 0; // of which the receiver said it consumed (eager_credit)
    // How long isends of this tag have been refused in a row (no buffer announced, no
    // credit), for the warning of a tag that is never received.
    SampledWait<1024> refused;
    bool warned = false;
  };

  // What the provider may still point into while an operation of the comm is in flight: the
  // requests, the control channel's buffers, and the port their completions go to.  The comm
  // hands it to the shared endpoint when it is destroyed, which frees it once nothing is in
  // flight (at once, unless the comm was aborted mid-operation).
  struct Posted : SharedEndpoint::Tenant {
    std::unique_ptr<SharedEndpoint::Port> on;
    std::unique_ptr<ControlChannel> control;
    // One request per message in flight: NCCL_NET_MAX_REQUESTS receives of up to maxRecvs
    // buffers each may be posted at once, and NCCL may fill all of them.
    std::array<SendRequest, kMaxRequests * kMaxRecvs> requests;
    SharedEndpoint::Port& port() override { return *on; }
  };

  explicit SendComm(Device& device) : device_(&device) {}
  SharedEndpoint::Port& port() const { return *posted_->on; }
  ControlChannel& control() const { return *posted_->control; }
  std::array<SendRequest, kMaxRequests * kMaxRecvs>& requests() const { return posted_->requests; }
  ncclResult_t progress();
  ncclResult_t on_message(std::span<const uint8_t> bytes);
  ncclResult_t on_announcement(const ReceiveAnnouncement& announcement);
  ncclResult_t on_credit(const EagerCredit& credit);
  // The announced buffer (tag, ordinal): its announcement's slot and index, or false.
  bool find_announced(int32_t tag, uint32_t ordinal, size_t* slot, size_t* index) const;
  // Posts the message into the announced buffer, or eagerly: no request (*request stays
  // nullptr) when the provider is busy or no request is free.
  ncclResult_t write_announced(void* data, size_t size, Stream& stream, size_t slot,
                               size_t index, MemoryHandle* mhandle, void** request);
  ncclResult_t send_eagerly(void* data, size_t size, Stream& stream, MemoryHandle* mhandle,
                            void** request);
  // (Only tags the eager CQ data can name: wire/eager_data.h.)
  bool may_send_eagerly(size_t size, const Stream& stream) const {
    return size <= eager_max_ && stream.eager_sent - stream.eager_consumed < eager_credits_ &&
           eager_tag(stream.tag);
  }
  // Posts the eager send `request` describes; -FI_EAGAIN or another failure as fi_senddata.
  ssize_t post_eager(SendRequest& request);
  // Posts the tail write of `request`'s message, or leaves it in unposted_tails_ when the
  // provider is busy (progress tries again).
  void post_tail(SendRequest& request);
  void post_unposted_tails();
  // One of `request`'s operations failed (`error`: its result).
  void part_failed(SendRequest& request, ncclResult_t error);
  // One of `request`'s operations completed or failed.
  void part_ended(SendRequest& request);
  // The request is over once no operation of it is in flight or waiting to be posted: done,
  // or failed, and then the receiver is told (once).
  void end_if_over(SendRequest& request);
  // HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS: posts the eager send held back, if any.
  ncclResult_t release_held_eager();
  // closeSend: sends send_closed when its count is exact and the provider takes it at once
  // (drain()); whether it was posted.
  bool tell_where_messages_end();
  // Tells the receiver that `request`'s message failed on this side.
  void notify_failure(const SendRequest& request);
  ncclResult_t fail_comm(ncclResult_t result, const std::string& reason);
  void reject_message(size_t slot, size_t index, SendFailureReason reason, uint64_t size);
  SendRequest* free_request();
  // Marks buffer `index` of the announcement in `slot` used; the announcement goes once all
  // of its buffers are.
  void use_buffer(size_t slot, size_t index);
  // For a request test() found pending: whether it has been so longer than write_timeout_.
  bool write_timed_out(SendRequest& request) const;
  // Logs once when a tag's isends have been refused for longer than write_timeout_.
  void note_refusal(Stream& stream);
  // HMR_NCCL_CHECK_LANDED: the checksum of a message isend handed to the provider (`rc`
  // ncclSuccess and a `request`), from host memory, as an INFO line (net/landed_bytes_check.h).
  void log_checksum(ncclResult_t rc, const void* request, const void* data, size_t size, int tag,
                    uint32_t ordinal, const MemoryHandle* mhandle) const;

  Device* device_;
  std::unique_ptr<Posted> posted_;
  fi_addr_t listener_ = FI_ADDR_UNSPEC;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;  // the recv comm, once it accepted
  uint64_t peer_port_ = 0;           // and its port there
  uint64_t nonce_ = 0;
  bool check_landed_ = false;  // HMR_NCCL_CHECK_LANDED: each message's checksum is logged
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds write_timeout_{60000};
  bool connected_ = false;
  bool closing_ = false;  // drain() began: nothing but control messages is posted
  // Writes and eager messages posted and not yet ended, and those that completed: what
  // send_closed tells the receiver to expect (wire/control_message.h).
  uint64_t data_in_flight_ = 0;
  uint64_t data_delivered_ = 0;
  uint64_t data_failed_ = 0;
  PeerWatch peer_watch_;  // the peer's process, on shm (peer_watch.h)
  QuietAfterExit quiet_after_exit_;  // when its seen exit counts (peer_watch.h)
  std::string failure_;  // why the comm can no longer be used; empty while it can
  ncclResult_t failure_result_ = ncclSuccess;
  // Announcements with buffers not yet filled, by the receiver's slot (a receiver reuses a slot
  // only once its receive is over, so a newer generation replaces an older one).
  std::array<std::optional<Announcement>, kMaxRequests> announced_;
  size_t live_announcements_ = 0;
  TagStreams<Stream> streams_;
  uint32_t offered_eager_max_ = 0;  // this side's HMR_NCCL_EAGER_MAX, told in the request
  uint32_t eager_max_ = 0;          // what the receiver accepted (0: every message announced)
  uint32_t eager_credits_ = 0;
  // Fault injection (HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS): every other eager send is held
  // back until the next one went out, or for two progress calls, so the receiver sees them
  // in another order than they were sent.
  bool reorder_eager_ = false;
  SendRequest* held_eager_ = nullptr;
  int held_progress_ = 0;
  size_t next_free_ = 0;  // where free_request() looks first
  // Requests whose tail write the provider did not take yet (capacity for all of them).
  std::vector<SendRequest*> unposted_tails_ = reserved(kMaxRequests * kMaxRecvs);
  static std::vector<SendRequest*> reserved(size_t n) {
    std::vector<SendRequest*> v;
    v.reserve(n);
    return v;
  }
};

}  // namespace hmr::nccl
