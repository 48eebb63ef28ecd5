// The receiving end of a connection, made by accept(): it announces each posted receive to the
// sender (one control message per irecv, naming every buffer's address, size, hmr key and
// tag) and learns from the remote CQ data of the sender's RMA writes which buffer is full and
// with how many bytes.  Nothing it is told is trusted: a write completion or failure notice
// that names no posted receive fails the comm with the reason.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <memory>
#include <string>

#include "peer_watch.h"
#include "../wire/control_message.h"
#include "control_channel.h"
#include "request.h"

namespace hmr::nccl {

class Device;
struct MemoryHandle;

// How a recv comm behaves, from the plugin's settings (settings.h).
struct RecvCommOptions {
  bool force_flush = false;            // iflush reads back host memory too
  bool reorder_announcements = false;  // fault injection: announcements out of order
  int flush_eagain = 0;                // fault injection: posts of a flush that see EAGAIN
};

class RecvComm {
 public:
  // Answers `request` (already checked against the listener's nonce) from a new endpoint.
  static ncclResult_t start(Device& device, const ConnectRequest& request,
                            const RecvCommOptions& options, std::unique_ptr<RecvComm>* out);
  ~RecvComm();

  // True once the accept has gone out, so the comm can be handed to NCCL.
  ncclResult_t poll_accepted(bool* accepted);

  ncclResult_t irecv(int n, void** data, const size_t* sizes, const int* tags,
                     MemoryHandle* const* mhandles, void** request);
  ncclResult_t iflush(int n, void** data, const int* sizes, MemoryHandle* const* mhandles,
                      void** request);
  ncclResult_t test(ReceiveRequest* request, int* done, int* sizes);
  ncclResult_t test(FlushRequest* request, int* done);
  Device& device() const { return *device_; }

 private:
  explicit RecvComm(Device& device) : device_(&device) {}
  ncclResult_t progress();
  ncclResult_t on_write(uint64_t data);
  ncclResult_t on_message(std::span<const uint8_t> bytes);
  ncclResult_t fail_comm(ncclResult_t result, const std::string& reason);
  ReceiveRequest* posted(uint8_t slot, uint8_t generation, uint8_t index);
  // Posts a flush's read-back: true once posted or failed, false when the provider is busy
  // (the request stays pending and test() tries again).
  bool post_flush(FlushRequest& request);

  Device* device_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  fi_addr_t self_ = FI_ADDR_UNSPEC;  // for iflush's read-back through the NIC
  bool force_flush_ = false;
  int flush_eagain_ = 0;
  bool accept_sent_ = false;
  PeerWatch peer_watch_;  // the peer's process, on shm (peer_watch.h)
  std::string failure_;
  ncclResult_t failure_result_ = ncclSuccess;
  uint32_t next_sequence_ = 0;  // the next irecv's number in its announcement
  std::array<ReceiveRequest, kMaxRequests> receives_;
  std::array<FlushRequest, kMaxRequests> flushes_;
};

}  // namespace hmr::nccl
