// A listener: a port on the device's shared endpoint (net/shared_endpoint.h), whose receive
// buffers take the connect requests addressed to it.  listen() writes the endpoint's address,
// the port and a fresh nonce into NCCL's handle; accept() takes connect requests carrying that
// nonce and answers each from a new recv comm.
// Requests that do not carry the nonce (another handle, a stale connection, random bytes), and
// connectors whose address is unusable, are logged and dropped, and the listener keeps
// listening; a request this side cannot answer (no endpoint or registration left: a file or
// memlock limit) fails accept(), or both ranks would wait for ever, and the connector is told
// why (a connect_refused from the shared endpoint, over the provider's connection the
// request came by where the provider can tell it is that connector's), so its connect fails
// too, with the reason, instead of waiting for an accept (by default without a deadline);
// later requests are refused as well.  accept() returns that failure once the
// refusal's send completed, or after kRefusalDrainTime.
#pragma once

#include <chrono>
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
  // Answers, refuses or drops one message; a request this side cannot answer leaves the
  // failure for accept() to return (failure_), and every later request is refused too.
  void on_message(std::span<const uint8_t> bytes);
  // Tells the connector of `request` that this side could not answer, and why (best effort:
  // what cannot be sent is logged).
  void refuse(const ConnectRequest& request, const std::string& reason);
  // The listener fails with `rc` and the reason this thread's last fail() logged (a first
  // failure and its reason stay), accept() returning it from `due` on (due_failure()).
  void fail_listener(ncclResult_t rc, std::chrono::steady_clock::time_point due);
  // What accept() returns once a refusal went out: ncclSuccess while none is due.
  ncclResult_t due_failure();
  // Tests that drive the shared endpoint's provider without taking what arrives
  // (tests/nccl-net/accept_race_test.cpp).
  friend struct ListenCommProbe;

  // What the listener posts through its port, retired to the endpoint when it closes with a
  // refusal still in flight.
  struct Posted : SharedEndpoint::Tenant {
    std::unique_ptr<SharedEndpoint::Port> on;
    std::unique_ptr<ControlChannel> control;  // refusals (sends only)
    SharedEndpoint::Port& port() override { return *on; }
  };
  SharedEndpoint::Port& port() const { return *posted_->on; }
  ControlChannel& control() const { return *posted_->control; }

  Device* device_;
  uint64_t nonce_ = 0;
  std::unique_ptr<Posted> posted_;
  std::vector<std::unique_ptr<RecvComm>> accepting_;  // accept sent, not yet handed out
  // The first request this side could not answer: accept()'s result once the refusal left.
  ncclResult_t failure_ = ncclSuccess;
  std::string failure_reason_;  // what start() logged for it: the connectors are told
  std::chrono::steady_clock::time_point failure_due_{};
  int refusals_ = 0;            // sent (kMaxRefusals at most)
};

}  // namespace hmr::nccl
