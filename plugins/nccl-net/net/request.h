// What isend, irecv and iflush hand NCCL as a request, and test() takes back.  Requests live in
// fixed pools inside their comm (NCCL has at most NCCL_NET_MAX_REQUESTS outstanding per comm),
// so posting allocates nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "../abi/nccl_net_common.h"
#include "../wire/eager_data.h"
#include "../wire/limits.h"
#include "../wire/write_completion.h"
#include "operation.h"
#include "sampled_wait.h"

namespace hmr::nccl {

class SendComm;
class RecvComm;
struct MemoryHandle;

enum class RequestKind : uint8_t { send, receive, flush };
enum class RequestState : uint8_t { idle, pending, done, failed };

struct Request {
  RequestKind kind;
  RequestState state = RequestState::idle;
  ncclResult_t error = ncclSuccess;  // when failed
  explicit Request(RequestKind k) : kind(k) {}
};

// Which announced buffer a send writes: the receiver's slot, generation and buffer index.
struct WriteTarget {
  uint8_t slot = 0;
  uint8_t generation = 0;
  uint8_t index = 0;
};

struct SendRequest : Request {
  SendRequest() : Request(RequestKind::send) {}
  SendComm* comm = nullptr;
  Operation write;       // the RMA write (the whole message, or its head) or the eager send
  Operation tail_write;  // the tail of a message of 1 MiB or more (wire/write_completion.h)
  uint8_t in_flight = 0;  // operations posted and neither completed nor failed
  bool part_failed = false;  // one of them failed: the request fails once none is in flight
  size_t size = 0;
  bool eager = false;
  WriteTarget target;  // which announced buffer it writes, to name it if the write fails
  EagerAddress eager_target;  // or which buffer it was sent eagerly for
  // The message (NCCL's buffer and its descriptor), for what is posted later: an eager send
  // held back by HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS, or a tail the provider could not take
  // when the head went (-FI_EAGAIN), with where it goes.
  const void* data = nullptr;
  void* desc = nullptr;
  bool tail_unposted = false;
  uint64_t remote_address = 0;
  uint64_t remote_key = 0;
  // For HMR_NCCL_WRITE_TIMEOUT: how long tests have found it pending.
  SampledWait<64> pending;
};

struct ReceiveRequest : Request {
  ReceiveRequest() : Request(RequestKind::receive) {}
  RecvComm* comm = nullptr;
  uint8_t slot = 0;
  uint8_t generation = 0;
  uint8_t count = 0;
  uint8_t done_mask = 0;
  uint8_t copying_mask = 0;  // buffers an eager message is being RMA-written into
  // Per buffer, which parts of an RMA-written message landed (wire/write_completion.h).
  LandedParts parts[kMaxRecvs];
  bool announced = false;
  uint32_t pending_tests = 0;  // tests that found it pending, while not announced
  size_t posted[kMaxRecvs] = {};
  size_t received[kMaxRecvs] = {};
  // Each buffer: where it is, its memory handle, its tag and ordinal (for eager messages).
  void* data[kMaxRecvs] = {};
  const MemoryHandle* mhandle[kMaxRecvs] = {};
  EagerAddress address[kMaxRecvs];
};

struct FlushRequest : Request {
  FlushRequest() : Request(RequestKind::flush) {}
  RecvComm* comm = nullptr;
  Operation read;
  // What to read back (a byte of the last buffer), and whether the read is posted yet: a
  // flush the provider cannot take now stays pending and is posted by test(), never dropped
  // (NCCL takes an iflush without a request as "done").
  uint64_t address = 0;
  uint64_t key = 0;
  bool read_posted = false;
  int eagain_left = 0;  // HMR_NCCL_TEST_FLUSH_EAGAIN
};

}  // namespace hmr::nccl
