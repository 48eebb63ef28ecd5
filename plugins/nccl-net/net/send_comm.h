// The sending end of a connection, from connect() on: first it connects (sends the listener a
// connect request and waits for the new recv comm's accept, under a deadline), then it moves
// messages.  A message moves as on NCCL's IB transport: the receiver announces each posted
// buffer (address, size, hmr key, tag); isend takes the oldest announcement with its tag and
// RMA-writes into that buffer with remote CQ data saying which buffer and how many bytes.
// Until the announcement is there, isend returns no request and NCCL asks again.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

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

  Device* device_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  fi_addr_t listener_ = FI_ADDR_UNSPEC;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;  // the recv comm, once it accepted
  uint64_t nonce_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds write_timeout_{60000};
  bool connected_ = false;
  std::string failure_;  // why the comm can no longer be used; empty while it can
  ncclResult_t failure_result_ = ncclSuccess;
  std::deque<Announcement> announcements_;
  std::array<SendRequest, 2 * kMaxRequests> requests_;
};

}  // namespace hmr::nccl
