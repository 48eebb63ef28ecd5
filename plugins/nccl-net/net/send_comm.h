// The sending end of a connection, from connect() on: first it connects (sends the listener a
// connect request and waits for the new recv comm's accept, under a deadline), then it moves
// messages.  A message moves as on NCCL's IB transport: the receiver announces each posted
// buffer (address, size, hmr key, tag); isend takes the oldest announcement with its tag and
// RMA-writes into that buffer with remote CQ data saying which buffer and how many bytes.
// Until the announcement is there, isend returns no request and NCCL asks again.
// Announcements are numbered by the receiver: the sender fills them in that order, keeping
// one that arrives early in its place until those before it came and were filled.
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

namespace hmr::nccl {

class Device;
struct MemoryHandle;

class SendComm {
 public:
  // Starts connecting to the listener `handle` describes.
  // `write_timeout_ms`: how long a posted write may stay incomplete before the comm fails.
  static ncclResult_t start(Device& device, const ListenHandle& handle, int timeout_ms,
                            int write_timeout_ms, std::unique_ptr<SendComm>* out);
  ~SendComm();

  // Progresses the connection: true once connected; an error when it failed or timed out.
  ncclResult_t poll_connected(bool* connected);

  ncclResult_t isend(void* data, size_t size, int tag, MemoryHandle* mhandle, void** request);
  ncclResult_t test(SendRequest* request, int* done, int* size);
  // Lets queued control messages (a failure notice to the receiver) go out, for a short while.
  void drain();
  Device& device() const { return *device_; }

 private:
  struct Announcement {
    ReceiveAnnouncement message;
    uint8_t used_mask = 0;
  };

  explicit SendComm(Device& device) : device_(&device) {}
  ncclResult_t progress();
  ncclResult_t on_message(std::span<const uint8_t> bytes);
  ncclResult_t fail_comm(ncclResult_t result, const std::string& reason);
  void reject_message(Announcement& announcement, size_t index, SendFailureReason reason,
                              uint64_t size);
  SendRequest* free_request();
  // The oldest receive not yet filled, once its announcement came; nullptr until then.
  Announcement* oldest();
  // Marks buffer `index` of the oldest announcement used; the next one becomes the oldest
  // once all of its buffers are.
  void use_buffer(size_t index);
  // For a request test() found pending: whether it has been so longer than write_timeout_.
  bool write_timed_out(SendRequest& request) const;
  static constexpr uint32_t kTestsPerClockRead = 64;

  Device* device_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  fi_addr_t listener_ = FI_ADDR_UNSPEC;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;  // the recv comm, once it accepted
  uint64_t nonce_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds write_timeout_{60000};
  bool connected_ = false;
  PeerWatch peer_watch_;  // the peer's process, on shm (peer_watch.h)
  std::string failure_;  // why the comm can no longer be used; empty while it can
  ncclResult_t failure_result_ = ncclSuccess;
  // Announcements by sequence number: announced_[s % kMaxRequests] holds receive s while it
  // is one of the kMaxRequests the receiver may have posted from next_sequence_ on.
  std::array<std::optional<Announcement>, kMaxRequests> announced_;
  uint32_t next_sequence_ = 0;
  // One request per message in flight: NCCL_NET_MAX_REQUESTS receives of up to maxRecvs
  // buffers each may be posted at once, and NCCL may fill all of them.
  std::array<SendRequest, kMaxRequests * kMaxRecvs> requests_;
  size_t next_free_ = 0;  // where free_request() looks first
};

}  // namespace hmr::nccl
