// The receiving end of a connection, made by accept(): it announces posted receives to the
// sender (one control message per irecv, naming every buffer's address, size, hmr key, tag
// and ordinal) and learns from the remote CQ data of the sender's RMA writes which buffer is
// full and with how many bytes.  Small messages come eagerly into its bounce buffers instead
// (net/eager.h), and a receive only such messages can fill is not announced.  Nothing it is
// told is trusted: a write completion, eager message or failure notice that names no posted
// receive, or one already filled, fails the comm with the reason.
//
// What arrives comes to an endpoint of the comm's own (the remote CQ data of a write names no
// comm, so it cannot share one yet); what the comm posts (its control messages, iflush's
// read-backs, eager copies into device memory) goes through its port on the device's shared
// endpoint (net/shared_endpoint.h), so its own endpoint never sends and ofi_rxm never makes
// that endpoint's transmit pool.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "peer_watch.h"
#include "../wire/control_message.h"
#include "control_channel.h"
#include "eager.h"
#include "landed_bytes_check.h"
#include "request.h"
#include "shared_endpoint.h"
#include "tag_streams.h"

namespace hmr::nccl {

class Device;
struct MemoryHandle;

class RecvComm {
 public:
  // Answers `request` (already checked against the listener's nonce) from a new endpoint,
  // with the device's settings (eager max, flush and fault injection).
  static ncclResult_t start(Device& device, const ConnectRequest& request,
                            std::unique_ptr<RecvComm>* out);
  ~RecvComm();

  // True once the accept has gone out and the connector's ready came, so the comm can be
  // handed to NCCL; also (and ncclSuccess) when the comm failed (the connector may believe
  // itself connected, so the comm is the caller's and its first irecv reports the failure),
  // no ready having come within HMR_NCCL_CONNECT_TIMEOUT (else HMR_NCCL_WRITE_TIMEOUT) of the
  // accept included.  An error only for a comm whose accept could not be delivered, with no
  // word from its connector (it went away): the listener drops it.
  ncclResult_t poll_accepted(bool* accepted);

  ncclResult_t irecv(int n, void** data, const size_t* sizes, const int* tags,
                     MemoryHandle* const* mhandles, void** request);
  ncclResult_t iflush(int n, void** data, const int* sizes, MemoryHandle* const* mhandles,
                      void** request);
  ncclResult_t test(ReceiveRequest* request, int* done, int* sizes);
  ncclResult_t test(FlushRequest* request, int* done);
  Device& device() const { return *device_; }
  // Where each receive and flush request it can hand out lives (as SendComm's).
  std::vector<const void*> request_addresses() const;
  // The endpoint what arrives for the comm comes to (which never sends: tests check it).
  const Endpoint& own_endpoint() const { return *endpoint_; }

 private:
  // Tests that drive the comm's provider without the comm taking what arrives
  // (tests/nccl-net/accept_race_test.cpp).
  friend struct RecvCommProbe;

  // Posted buffers a comm may have at once (NCCL_NET_MAX_REQUESTS receives of maxRecvs).
  static constexpr size_t kPostedBuffers = kMaxRequests * kMaxRecvs;
  struct Stream {
    int32_t tag = 0;
    uint32_t next_ordinal = 0;  // the ordinal of this tag's next posted buffer
    uint32_t consumed = 0;      // eager messages consumed (a running count, wrapping)
    uint32_t reported = 0;      // `consumed` as last told to the sender
    // Where the buffer of ordinal k was posted: posted_at[k % kPostedBuffers] is its slot *
    // kMaxRecvs + index + 1 (0: none).  A tag has fewer than kPostedBuffers posted at once,
    // so an entry is the buffer's while it is posted; a stale one fails the match's checks.
    std::array<uint16_t, kPostedBuffers> posted_at{};
    // Eager messages of ordinal k that came before their buffer was posted:
    // early_at[k % kPostedBuffers] is the index in unexpected_ + 1 (0: none).  A sender has
    // at most kEagerCreditsPerTag (< kPostedBuffers) of them unconsumed, so they never share
    // an entry; `early` counts them.
    std::array<uint16_t, kPostedBuffers> early_at{};
    uint32_t early = 0;
  };
  // An eager message's bytes: in its bounce buffer (held, not yet reposted), or copied out to
  // the heap when too few bounce buffers were left posted (a spill).
  struct EagerPayload {
    Operation* bounce = nullptr;
    std::vector<uint8_t> spill;
    size_t len = 0;
  };
  // An eager message on its way through the NIC into device memory.
  struct EagerCopy : Operation {
    ReceiveRequest* request = nullptr;
    size_t index = 0;  // which buffer of the request
    int32_t tag = 0;
    EagerPayload payload;
    hmr_mr* spill_mr = nullptr;  // a spill's registration, for the write's local descriptor
    bool posted = false;  // false while the provider said -FI_EAGAIN (progress retries)
  };
  // An eager message that came before its buffer was posted.
  struct Unexpected {
    EagerAddress address;
    EagerPayload payload;
  };
  // Takes the eager message that came early for `address`, if one did.
  std::optional<EagerPayload> take_early(Stream& stream, const EagerAddress& address);

  // What the provider may still point into while an operation the comm posted through its
  // port is in flight: the port, the control channels (the bounce buffers an eager copy reads
  // from are the receive channel's; its own endpoint is closed first), the flush requests and
  // the eager copies.  Handed to the shared endpoint when the comm is destroyed, which frees
  // it once nothing is in flight (at once, unless the comm was aborted mid-operation).
  struct Posted : SharedEndpoint::Tenant {
    std::unique_ptr<SharedEndpoint::Port> on;
    std::unique_ptr<ControlChannel> control_out;  // through the port
    std::unique_ptr<ControlChannel> control_in;   // on the comm's own endpoint; eager bounces too
    std::array<FlushRequest, kMaxRequests> flushes;
    // Eager messages on their way into device memory (a list: the provider holds pointers to
    // them), and contexts to reuse.
    std::list<EagerCopy> copies;
    std::list<EagerCopy> spare_copies;
    ~Posted() override;
    SharedEndpoint::Port& port() override { return *on; }
  };

  explicit RecvComm(Device& device) : device_(&device) {}
  SharedEndpoint::Port& port() const { return *posted_->on; }
  ControlChannel& control_out() const { return *posted_->control_out; }
  ControlChannel& control_in() const { return *posted_->control_in; }
  std::list<EagerCopy>& copies() const { return posted_->copies; }
  // Reads what the comm posted through its port has done; ncclSuccess, or the comm's failure.
  ncclResult_t progress_posted();
  // Reads what arrived at the comm's own endpoint (`taken`: how many completions).
  ncclResult_t progress_received(size_t* taken);
  ncclResult_t progress();
  ncclResult_t on_write(uint32_t data);
  ncclResult_t on_message(std::span<const uint8_t> bytes);
  ncclResult_t on_eager(Operation& bounce, size_t len, uint32_t data);
  // The posted, unfilled buffer an eager message names: its request and index, or nullptr.
  ReceiveRequest* posted_for(const EagerAddress& address, size_t* index);
  // Moves an eager message into buffer `index` of `request`: a copy (host memory) or an RMA
  // write through the NIC (device memory); its bounce buffer goes back to the provider and
  // the tag's credit to the sender once done.
  ncclResult_t deliver_eager(ReceiveRequest& request, size_t index, EagerPayload payload);
  // Where an eager message's bytes are: its bounce buffer, or its spill.
  const uint8_t* bytes_of(const EagerPayload& payload) const;
  ncclResult_t post_copy(EagerCopy& copy);
  ncclResult_t on_copied(EagerCopy& copy, bool ok, const std::string& reason);
  // An eager message of `tag` is consumed: its bounce buffer (if it still has one) is posted
  // again, and the sender gets credits back every half of them.
  ncclResult_t consumed(EagerPayload& payload, int32_t tag);
  ncclResult_t announce(ReceiveRequest& request);
  // Whether the sender may fill this buffer only eagerly (it is not announced): small, in
  // host memory, of a tag eager messages can name.
  bool eager_only(size_t size, const MemoryHandle& mhandle, int32_t tag) const;
  ncclResult_t fail_comm(ncclResult_t result, const std::string& reason);
  // Sets sender_ended_ once the sender's messages are all here and it closed, or once its
  // process exited and progress calls found nothing more (`arrived`: whether this one did).
  void look_for_the_senders_end(bool arrived);
  // One write or eager message of the sender's arrived: a failure when its send_closed
  // counted fewer.
  ncclResult_t count_arrival();
  // The pending receive in `slot` whose generation's `generation_mask` are `generation` and
  // that has a buffer `index` (a write's CQ data carries 2 bits of it, a control message 8).
  ReceiveRequest* posted(uint8_t slot, uint8_t index, uint8_t generation, uint8_t generation_mask);
  // HMR_NCCL_CHECK_LANDED: warns for each host buffer of an irecv whose bytes changed since a
  // receive into it was reported done.
  void check_untouched_since_received(int n, void* const* data, const size_t* sizes,
                                      const int* tags, MemoryHandle* const* mhandles);
  // Posts a flush's read-back: true once posted or failed, false when the provider is busy
  // (the request stays pending and test() tries again).
  bool post_flush(FlushRequest& request);

  Device* device_;
  std::unique_ptr<Endpoint> endpoint_;  // what arrives
  std::unique_ptr<Posted> posted_;      // what the comm posts
  fi_addr_t peer_ = FI_ADDR_UNSPEC;     // the send comm, as the port's endpoint reaches it
  uint64_t peer_port_ = 0;  // the send comm's port on its endpoint (net/shared_endpoint.h)
  // The port's endpoint itself, for iflush's read-backs and eager copies through the NIC.
  fi_addr_t self_ = FI_ADDR_UNSPEC;
  bool flush_host_memory_ = false;
  size_t flush_reads_posted_ = 0;
  int flush_eagain_ = 0;
  uint32_t eager_max_ = 0;  // agreed with the sender (0: every receive announced)
  bool eager_through_nic_ = false;
  TagStreams<Stream> streams_;
  std::vector<Unexpected> unexpected_;   // indexed by Stream::early_at
  std::vector<uint16_t> free_unexpected_;  // entries of unexpected_ not in use
  size_t bounces_posted_ = 0;  // receive buffers the provider has (the rest are held)
  uint64_t nonce_ = 0;  // the listener's, which the connector's ready repeats
  int ready_timeout_ms_ = 60000;  // how long the ready may take after the accept left
  std::chrono::steady_clock::time_point ready_deadline_{};  // from when the accept was posted
  bool ready_overdue_ = false;   // a call found the deadline past
  // The accept's send failed for the connector's reasons, before a word from it: the
  // listener drops the comm (RecvComm::poll_accepted).
  bool accept_undeliverable_ = false;
  bool connector_ready_ = false;  // its ready came (wire/control_message.h)
  bool connector_spoke_ = false;  // a message or write of the connector's arrived here
  PeerWatch peer_watch_;  // the peer's process, on shm (peer_watch.h)
  QuietAfterExit quiet_after_exit_;  // when the seen exit counts (peer_watch.h)
  int64_t write_timeout_ns_ = 60'000'000'000;  // HMR_NCCL_WRITE_TIMEOUT
  // Where the sender's messages end, once that is known: why a receive that needs more can
  // never complete (empty while more may come).  Known when as many writes and eager
  // messages arrived as its send_closed counted, or when its process exited and the quiet
  // after that passed (look_for_the_senders_end()).
  std::string sender_ended_;
  bool sender_exited_ = false;  // the second way: the comm fails once no early message is left
  uint64_t arrived_ = 0;  // the sender's writes and eager messages that arrived (remote CQ data)
  std::optional<uint64_t> sender_delivered_;  // its send_closed count, once that came
  std::string failure_;
  ncclResult_t failure_result_ = ncclSuccess;
  std::array<ReceiveRequest, kMaxRequests> receives_;
  std::optional<LandedBytesCheck> landed_check_;  // HMR_NCCL_CHECK_LANDED
};

}  // namespace hmr::nccl
