// One reliable-datagram libfabric endpoint with its own completion queue and address vector:
// what every listen, send and receive comm of the plugin owns.  Posting never blocks: a full
// queue comes back as -FI_EAGAIN and the caller retries after progressing.  tcp and shm
// progress manually, so poll() is also what moves bytes; NCCL calls test() often enough.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libfabric.h"

namespace hmr::nccl {

// Every operation's context starts with this, so providers that need FI_CONTEXT(2) space have it.
struct OperationContext {
  fi_context2 provider_space;
};

struct Completion {
  OperationContext* context;  // nullptr for a remote write's CQ data
  uint64_t flags;             // FI_SEND, FI_RECV, FI_WRITE, FI_READ, FI_REMOTE_CQ_DATA ...
  size_t len;
  uint64_t data;
};

struct CompletionError {
  OperationContext* context = nullptr;  // the operation that failed, when the provider says
  int error = 0;                        // positive FI_E* code
  std::string reason;
};

class Endpoint {
 public:
  // Opens an endpoint of `info`'s kind on `domain` (which the caller keeps open longer), with a
  // completion queue of `queue_depth` entries.
  static std::unique_ptr<Endpoint> open(const Libfabric& libfabric, fi_info* info,
                                        fid_domain* domain, std::string* why,
                                        size_t queue_depth = kQueueDepth);
  // Enough for NCCL_NET_MAX_REQUESTS receives, their announcements and writes in both
  // directions, with room to spare: one comm's.
  static constexpr size_t kQueueDepth = 1024;
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // fi_getname: what a peer inserts to reach this endpoint.
  std::vector<uint8_t> address() const { return address_; }
  bool insert(std::span<const uint8_t> address, fi_addr_t* peer, std::string* why);
  // fi_av_remove: the provider closes its connection to the peer (ofi_rxm: its socket).
  void remove(fi_addr_t peer);
  // Addresses in the endpoint's address vector: 0 for an endpoint that never sends (nothing
  // can be posted towards a peer without one), which is what tests check of a recv comm's.
  size_t addresses() const { return addresses_.load(std::memory_order_relaxed); }

  // Each returns 0, -FI_EAGAIN (progress and retry) or another negative FI_E* code.
  ssize_t post_receive(void* buf, size_t len, void* desc, OperationContext* context);
  ssize_t send(const void* buf, size_t len, void* desc, fi_addr_t peer, OperationContext* context);
  // `data`: 32 bits, what every provider the plugin selects carries (EFA and verbs no more).
  ssize_t send_with_data(const void* buf, size_t len, void* desc, uint32_t data, fi_addr_t peer,
                         OperationContext* context);
  ssize_t write(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t remote_addr,
                uint64_t key, OperationContext* context);
  ssize_t write_with_data(const void* buf, size_t len, void* desc, uint32_t data, fi_addr_t peer,
                          uint64_t remote_addr, uint64_t key, OperationContext* context);
  ssize_t read(void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t remote_addr,
               uint64_t key, OperationContext* context);

  // Reads up to out.size() completions: how many (0 when none), or -1 with `error` filled for
  // a failed operation (its context, libfabric's code and text).  An empty `out` only drives
  // the provider's progress (libfabric's util CQ progresses before it reads, none here).
  int poll(std::span<Completion> out, CompletionError* error);

  const Libfabric& libfabric() const { return *libfabric_; }
  // The libfabric endpoint itself, for what the plugin never posts (its tests' lying peer
  // writes 64-bit CQ data with it).
  fid_ep* native() const { return ep_; }

 private:
  explicit Endpoint(const Libfabric& libfabric) : libfabric_(&libfabric) {}

  const Libfabric* libfabric_;
  fid_ep* ep_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  std::vector<uint8_t> address_;
  std::atomic<size_t> addresses_{0};
};

}  // namespace hmr::nccl
