// What the comm tests (hmr_nccl_net_comm_tests) do inside a SendComm that two processes
// reach only by chance: wait for its connect request to leave, and leave a message's tail
// unposted, as a provider that answered -FI_EAGAIN does.
#pragma once

#include <string>

#include "net/control_channel.h"
#include "net/send_comm.h"
#include "wire/control_message.h"

namespace hmr::nccl {

struct SendCommProbe {
  static bool request_left(SendComm& comm) { return !comm.control().busy(); }

  // A pending message of `size` bytes (over 1 MiB: a head and a tail) from `data`, whose
  // head went and whose tail the provider refused with -FI_EAGAIN: progress posts it later.
  static void leave_tail_unposted(SendComm& comm, const void* data, size_t size) {
    SendRequest& request = comm.requests()[0];
    request.state = RequestState::pending;
    request.size = size;
    request.data = data;
    request.desc = nullptr;
    request.remote_address = 0x10000;
    request.remote_key = 0;
    request.target = WriteTarget{};
    request.part_failed = false;
    request.in_flight = 1;
    request.tail_unposted = true;
    comm.unposted_tails_.push_back(&request);
  }
  static size_t unposted_tails(const SendComm& comm) { return comm.unposted_tails_.size(); }
  // Undoes leave_tail_unposted (nothing was posted), so the comm closes as usual.
  static void forget_unposted_tails(SendComm& comm) {
    for (SendRequest* request : comm.unposted_tails_) {
      request->tail_unposted = false;
      request->in_flight = 0;
      request->state = RequestState::idle;
    }
    comm.unposted_tails_.clear();
  }
  // Queues a failure notice for the receiver (a message that failed here), so drain() has a
  // control message to let go.
  static bool queue_failure_notice(SendComm& comm, std::string* why) {
    SendFailure notice;
    notice.slot = 0;
    notice.index = 0;
    notice.generation = 0;
    notice.reason = SendFailureReason::write_failed;
    notice.size = 1;
    return comm.control().send(notice, comm.peer_, comm.peer_port_, why);
  }
};

}  // namespace hmr::nccl
