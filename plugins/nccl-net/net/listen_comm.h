// A listening endpoint: listen() writes its address and a fresh nonce into NCCL's handle;
// accept() takes connect requests carrying that nonce and answers each from a new recv comm.
// Requests that do not carry the nonce (another handle, a stale connection, random bytes), and
// connectors whose address is unusable, are logged and dropped, and the listener keeps
// listening; a request this side cannot answer (no endpoint or registration left: a file or
// memlock limit) fails accept(), or both ranks would wait for ever.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../wire/listen_handle.h"
#include "control_channel.h"
#include "recv_comm.h"

namespace hmr::nccl {

class Device;

class ListenComm {
 public:
  static ncclResult_t open(Device& device, std::span<uint8_t, kHandleSize> handle,
                           std::unique_ptr<ListenComm>* out);
  ~ListenComm();

  // A recv comm once one is connected, else nullptr (NCCL calls again); an error when a
  // request could not be answered for a reason of this side's.
  ncclResult_t accept(std::unique_ptr<RecvComm>* out);
  Device& device() const { return *device_; }

 private:
  explicit ListenComm(Device& device) : device_(&device) {}
  // ncclSuccess for a message answered or dropped; the error of a request this side could
  // not answer.
  ncclResult_t on_message(std::span<const uint8_t> bytes);
  // Tests that drive the listener's provider without taking what arrives
  // (tests/nccl-net/accept_race_test.cpp).
  friend struct ListenCommProbe;

  Device* device_;
  uint64_t nonce_ = 0;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  std::vector<std::unique_ptr<RecvComm>> accepting_;  // accept sent, not yet handed out
};

}  // namespace hmr::nccl
