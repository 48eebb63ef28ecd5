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

struct SendRequest : Request {
  SendRequest() : Request(RequestKind::send) {}
  SendComm* comm = nullptr;
  Operation write;  // the RMA write or the eager send
  size_t size = 0;
  bool eager = false;
  WriteCompletion target;  // which announced buffer it writes, to name it if the write fails
  EagerAddress eager_target;  // or which buffer it was sent eagerly for
  // An eager send held back by HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS, posted later.
  const void* held_data = nullptr;
  void* held_desc = nullptr;
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
