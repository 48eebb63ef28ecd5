// One libfabric endpoint per device that every send comm of the device posts on, so a comm
// costs a port (a random 64-bit key, a few queues) instead of an endpoint of its own: with
// ofi_rxm an endpoint holds ~47 MB of buffer pools (docs/nccl-plugin.md, "One endpoint for
// the send comms of a device").  A recv comm posts here too (its control messages, flush
// reads and eager copies), through a port whose id it tells nobody: its receives stay on an
// endpoint of its own, which then never sends, and so never makes ofi_rxm's transmit pool
// (~16.5 MB of its ~37 MB).  A listen comm is a port too: its handle names the endpoint's
// address and the port, and connect requests arrive in the endpoint's buffers.
//
// What arrives on it is sorted per port:
//  - completions of a comm's own operations (each Operation carries its comm's port id,
//    stamped by the Port when it posts) go to that comm's poll;
//  - control messages land in the endpoint's own receive buffers and go, by the port their
//    header names (wire/control_message.h), to that comm's message queue; the buffer is
//    reposted at once (a comm that does not poll never holds another's buffers);
//  - a failure no operation owns goes to every port (each comm fails with it), and so does a
//    receive buffer the provider refuses to take back (the comms' messages would stop); after
//    either, new comms go to another endpoint.
// Whichever comm polls reads the completion queue for all of them, under the endpoint's lock:
// NCCL drives comms of different communicators from different proxy threads, and a comm's
// state is touched only by its own thread, so another comm's completions are queued, never
// handled, by the thread that read them.
//
// Lifetimes: an operation's context points into its comm, so a comm may be freed only once
// none of its operations is in flight.  A comm closed with some still in flight (an abort)
// hands what they point into to the endpoint (retire()); it is freed once they ended (found
// when a later comm connects or is retired) or when the endpoint closes, after the provider's
// endpoint, so nothing points into it any more.  Its Device closes the endpoint when no open
// comm is left on it, and retires comms under its own lock, so two closes never free it under
// each other.  Until then the provider may go on with a retired comm's operations as the
// endpoint progresses for other comms, reading buffers NCCL freed before it closed the comm
// (on tcp the kernel's copy fails with EFAULT, or sends what was mapped there since; on an
// RDMA NIC the registration's invalidation ends it).  Peer addresses are inserted once per
// endpoint and removed when the last port using them goes, which closes the provider's
// connection to the peer; another shared endpoint's are kept (Port::PeerKind).  The
// endpoint's state is guarded by its mutex.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "../fabric/endpoint.h"
#include "../wire/control_message.h"
#include "operation.h"

namespace hmr::nccl {

class ControlChannel;
class Device;

class SharedEndpoint {
 public:
  class Port;
  // What a closed comm leaves for the provider to finish: the memory its operations point
  // into, with its port.
  class Tenant {
   public:
    virtual ~Tenant() = default;
    virtual Port& port() = 0;
  };

  static std::unique_ptr<SharedEndpoint> open(Device& device, std::string* why);
  // Closes the provider's endpoint first, then frees what retired comms left.
  ~SharedEndpoint();
  SharedEndpoint(const SharedEndpoint&) = delete;
  SharedEndpoint& operator=(const SharedEndpoint&) = delete;

  // A port with a fresh random id (a 64-bit key from getrandom: a peer learns only its own
  // comm's, and cannot work out another's from it).
  std::unique_ptr<Port> attach();
  // Polls for the operations of a closing comm's `port` for a short while (none when the
  // endpoint is stalled already), so that what was posted just before (a failure notice) ends
  // and the comm need not be retired.  Called without the device's lock: the port is still
  // open, so the endpoint stays.
  void settle(Port& port);
  // Frees `tenant` now if none of its operations is in flight, else keeps it for sweep().
  void retire(std::unique_ptr<Tenant> tenant);
  // Frees retired comms whose operations ended (the Device calls it before it looks at the
  // endpoint: when a comm connects or closes).
  void sweep();
  // Ports of comms still open (retired ones not counted).
  size_t open_ports() const;
  // Peer addresses inserted (each once, however many ports use it).
  size_t peers() const;
  // A retired comm's operations have not ended (as of the last sweep): the endpoint may carry
  // an operation that never ends (a peer that died mid-message), and on some providers that
  // holds back what comes after it on the same endpoint (shm 1.17 was seen to: a write to a
  // dead peer kept every later completion of the endpoint from being reported).  Or a receive
  // buffer could not be posted again, or the provider reported a failure that names no
  // operation (the endpoint's state is unknown).  New comms get another endpoint
  // (Device::attach_comm); this one is closed when its last open comm goes, which ends
  // what the retired ones left.
  bool stalled() const;
  const std::vector<uint8_t>& address() const { return address_; }
  // Tests that inject what the provider reports (tests/nccl-net/shared_endpoint_test.cpp).
  friend struct SharedEndpointProbe;

  class Port {
   public:
    ~Port();
    Port(const Port&) = delete;
    Port& operator=(const Port&) = delete;

    uint64_t id() const { return id_; }
    SharedEndpoint& endpoint() const { return *shared_; }
    // The endpoint's address: what a peer inserts to reach this port (with the id).
    const std::vector<uint8_t>& address() const { return shared_->address(); }
    const Libfabric& libfabric() const { return shared_->endpoint_->libfabric(); }
    // Whose address it is: a recv comm's own endpoint (the provider's connection to it
    // carries only this comm's traffic, and goes with the last port that uses it), or a
    // shared endpoint, a listener's included (another process's, or this one: its
    // connection also carries what
    // the comms on that endpoint send here, in the other direction, which no port counts),
    // kept until the endpoint closes (one per peer endpoint ever seen: a peer's replaces its
    // own after a stall).
    enum class PeerKind : bool { comm, shared_endpoint };
    // A peer's address, inserted once per endpoint however many ports use it.
    bool insert(std::span<const uint8_t> address, fi_addr_t* peer, std::string* why,
                PeerKind kind = PeerKind::comm);

    // As Endpoint's, with the operation stamped with this port and counted in flight.
    ssize_t send(const void* buf, size_t len, void* desc, fi_addr_t peer, Operation* op);
    ssize_t send_with_data(const void* buf, size_t len, void* desc, uint32_t data, fi_addr_t peer,
                           Operation* op);
    ssize_t write_with_data(const void* buf, size_t len, void* desc, uint32_t data, fi_addr_t peer,
                            uint64_t remote_addr, uint64_t key, Operation* op);
    ssize_t write(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t remote_addr,
                  uint64_t key, Operation* op);
    ssize_t read(void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t remote_addr,
                 uint64_t key, Operation* op);

    // This port's completions, as Endpoint::poll: how many, or -1 with `error` filled (an
    // operation of this port that failed, a failure no operation owns, or more control
    // messages for this port than it can hold).  Reads the endpoint's queue when none is
    // waiting here.
    int poll(std::span<Completion> out, CompletionError* error);
    // The next control message for this port, copied into `into`: its length, 0 when none.
    size_t take_message(std::span<uint8_t, kControlBufferSize> into);
    // Operations posted through this port whose completion has not been read yet.
    size_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

   private:
    friend class SharedEndpoint;
    Port(SharedEndpoint& shared, uint64_t id) : shared_(&shared), id_(id) {}
    // Posts `op` with `post` (an Endpoint call), counted in flight while it is.
    template <typename Post>
    ssize_t counted(Operation* op, Post post);
    // Under the endpoint's lock: a control message for this port.
    void queue_message(std::span<const uint8_t> bytes);

    struct Routed {
      Completion completion{};
      bool failed = false;
      CompletionError error;
    };
    struct Message {
      uint16_t length = 0;
      uint8_t bytes[kControlBufferSize];
    };

    SharedEndpoint* shared_;
    const uint64_t id_;
    // Invariant: at least the number of this port's operations the provider may still
    // report.  It goes up before a post (the completion may be read by another thread before
    // the post returns), down when the post is refused, and down when a completion or
    // failure naming the port is read (under the endpoint's lock).  So 0 means no completion
    // will name the port again, and its memory may go.
    std::atomic<size_t> in_flight_{0};
    // Under the endpoint's lock: completions read by other ports' polls, messages for this
    // port (a ring, grown on demand up to kMaxQueuedMessages), and the peers it inserted.
    std::vector<Routed> routed_;
    size_t routed_head_ = 0;
    std::vector<Message> messages_;
    size_t message_head_ = 0;
    size_t message_count_ = 0;
    bool overflowed_ = false;
    std::vector<fi_addr_t> peers_;
  };

 private:
  SharedEndpoint() = default;
  // Under mutex_: reads one batch of the endpoint's queue (at most out.size() entries): the
  // completions of `reader`'s operations go to `out` (how many is the result), the rest, and
  // every failure, to the queues of the ports they are for.
  int read_queue(Port& reader, std::span<Completion> out);
  void route_message(const Operation& receive, size_t len);
  void route_failure(const CompletionError& error);
  // A failure for every port (at most one unread each).
  void fail_every_port(const CompletionError& error);
  void repost(const Operation& receive);
  // The port is gone, and with it its uses of peers: those no other port uses are removed.
  void detach(Port& port);

  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> receives_;  // the control messages' buffers
  std::vector<Operation*> unposted_;          // of them, refused with EAGAIN: posted later
  std::vector<uint8_t> address_;

  mutable std::mutex mutex_;  // the completion queue, the ports and their queues, peers_
  std::unordered_map<uint64_t, Port*> ports_;
  // Warnings a peer can cause, one per message, are rationed (the first 8, then one in 1024):
  // messages that named no port, and those that did not fit a receive buffer.
  uint64_t unaddressed_ = 0;
  uint64_t truncated_ = 0;
  // A receive buffer was not taken back, or the provider reported a failure naming no
  // operation: new comms go to another endpoint.
  std::atomic<bool> broken_{false};
  struct Peer {
    fi_addr_t address = FI_ADDR_UNSPEC;
    size_t uses = 0;
    bool kept = false;  // a shared endpoint's: not removed when no port uses it
  };
  std::map<std::vector<uint8_t>, Peer> peers_;
  std::unordered_map<fi_addr_t, const std::vector<uint8_t>*> peer_names_;

  mutable std::mutex retired_mutex_;
  std::vector<std::unique_ptr<Tenant>> retired_;
};

}  // namespace hmr::nccl
