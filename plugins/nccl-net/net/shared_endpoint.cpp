#include "shared_endpoint.h"

#include <rdma/fi_errno.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "control_channel.h"
#include "device.h"
#include "log.h"

namespace hmr::nccl {
namespace {

// Receive buffers for the control messages of every send comm of the device (receive
// announcements, credits, accepts).  Each is copied to its comm's queue and reposted as soon
// as it is read, so these only absorb what arrives between two polls; beyond them the
// provider keeps messages as unexpected (a reliable-datagram endpoint drops none).
constexpr size_t kSharedReceives = 256;
// Control messages one comm may have waiting unread.  A receiver announces each receive it
// posts once (at most kMaxRequests at a time) and returns credits in batches, and the comm
// reads its queue at every progress: many times that is a broken peer, and its comm fails.
constexpr size_t kMaxQueuedMessages = 8 * kMaxRequests;
constexpr size_t kFirstMessageRing = 16;
// How many batches one look at a retired comm reads before it is looked at again later.
constexpr int kDiscardRounds = 64;
// How long a closing comm's operations are polled for before it is retired with them in
// flight: what was posted just before (a failure notice) ends within this on a live peer.
constexpr auto kRetireGrace = std::chrono::milliseconds(200);
// The completion queue: one comm's depth for each of the first several comms (libfabric's
// common CQ code keeps what does not fit in an overflow list besides).
constexpr size_t kSharedQueueDepth = 8 * Endpoint::kQueueDepth;

// Whether the count-th warning of a kind is logged.
bool rationed(uint64_t& count) { return ++count <= 8 || count % 1024 == 0; }

// 64 random bits from the kernel (std::random_device where getrandom is refused).
uint64_t random_id() {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, 0) == static_cast<ssize_t>(sizeof id)) return id;
  std::random_device device;
  return uint64_t{device()} << 32 | device();
}

// Reads and drops what is `port`'s (the comm is closed): its completions are only counted.
void discard(SharedEndpoint::Port& port) {
  Completion completions[16];
  uint8_t message[kControlBufferSize];
  for (int round = 0; round < kDiscardRounds; ++round) {
    CompletionError error;
    const int n = port.poll(completions, &error);
    while (port.take_message(message) != 0) {
    }
    if (n == 0) return;
  }
}

}  // namespace

std::unique_ptr<SharedEndpoint> SharedEndpoint::open(Device& device, std::string* why) {
  std::unique_ptr<SharedEndpoint> shared(new SharedEndpoint());
  shared->endpoint_ = Endpoint::open(device.libfabric(), device.info(), device.domain(), why,
                                     kSharedQueueDepth);
  if (!shared->endpoint_) return nullptr;
  shared->receives_ = ControlChannel::open(device, *shared->endpoint_, kSharedReceives,
                                           kControlBufferSize, 0, why);
  if (!shared->receives_ || !shared->receives_->post_receives(why)) return nullptr;
  shared->address_ = shared->endpoint_->address();
  return shared;
}

SharedEndpoint::~SharedEndpoint() {
  // The provider's endpoint first: once it is closed, no operation points into a retired
  // comm or a receive buffer, and the retired comms can go (their ports find no endpoint to
  // remove peers from).
  endpoint_.reset();
  std::vector<std::unique_ptr<Tenant>> retired;
  {
    std::lock_guard hold(retired_mutex_);
    retired.swap(retired_);
  }
  retired.clear();
  receives_.reset();
}

std::unique_ptr<SharedEndpoint::Port> SharedEndpoint::attach() {
  std::lock_guard hold(mutex_);
  uint64_t id = 0;
  do {
    id = random_id();
  } while (id == 0 || ports_.count(id) != 0);  // (0 is no port)
  std::unique_ptr<Port> port(new Port(*this, id));
  ports_.emplace(id, port.get());
  return port;
}

void SharedEndpoint::settle(Port& port) {
  if (stalled()) return;  // (one wait per abort is enough)
  const auto grace = std::chrono::steady_clock::now() + kRetireGrace;
  do {
    discard(port);
  } while (port.in_flight() != 0 && std::chrono::steady_clock::now() < grace);
}

void SharedEndpoint::retire(std::unique_ptr<Tenant> tenant) {
  if (tenant) {
    Port& port = tenant->port();
    discard(port);
    if (port.in_flight() == 0) {
      tenant.reset();
    } else {
      // (Its peers stay in the address vector until it is freed: removing a peer with an
      // operation towards it in flight did not end the operation on tcp;ofi_rxm 1.17, and
      // fi_av(3) promises nothing of it.)
      log_info("a closed comm has %zu operation(s) in flight: kept until they end, and "
               "later comms get another endpoint", port.in_flight());
      std::lock_guard hold(retired_mutex_);
      retired_.push_back(std::move(tenant));
    }
  }
}

void SharedEndpoint::sweep() {
  std::vector<std::unique_ptr<Tenant>> ended;
  {
    std::lock_guard hold(retired_mutex_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      discard((*it)->port());
      if ((*it)->port().in_flight() == 0) {
        ended.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // (Freed here, outside the lock: each closes its control buffers' registration.)
}

size_t SharedEndpoint::open_ports() const {
  size_t retired = 0;
  {
    std::lock_guard hold(retired_mutex_);
    retired = retired_.size();
  }
  std::lock_guard hold(mutex_);
  return ports_.size() - std::min(retired, ports_.size());
}

size_t SharedEndpoint::peers() const {
  std::lock_guard hold(mutex_);
  return peers_.size();
}

bool SharedEndpoint::stalled() const {
  if (broken_.load(std::memory_order_acquire)) return true;
  std::lock_guard hold(retired_mutex_);
  return !retired_.empty();
}

void SharedEndpoint::detach(Port& port) {
  std::lock_guard hold(mutex_);
  ports_.erase(port.id_);
  for (const fi_addr_t address : port.peers_) {
    const auto name = peer_names_.find(address);
    if (name == peer_names_.end()) continue;
    const auto peer = peers_.find(*name->second);
    if (--peer->second.uses != 0 || peer->second.kept) continue;
    // The last comm that used the peer is gone: so is the provider's connection to it.
    if (endpoint_) endpoint_->remove(address);
    peer_names_.erase(name);
    peers_.erase(peer);
  }
}

int SharedEndpoint::read_queue(Port& reader, std::span<Completion> out) {
  if (!unposted_.empty()) {
    std::vector<Operation*> waiting;
    waiting.swap(unposted_);
    for (Operation* receive : waiting) repost(*receive);  // (back to unposted_ if refused again)
  }
  Completion batch[16];
  const size_t want = std::min(out.size(), std::size(batch));
  CompletionError failure;
  const int n = endpoint_->poll(std::span<Completion>(batch, want), &failure);
  if (n < 0) {
    route_failure(failure);
    return 0;
  }
  size_t mine = 0;
  for (int i = 0; i < n; ++i) {
    const Completion& c = batch[i];
    auto* op = static_cast<Operation*>(c.context);
    // Remote CQ data: nothing writes into a send comm's memory.
    if (op == nullptr) continue;
    if (op->port == 0) {
      if (op->kind == OperationKind::control_receive) route_message(*op, c.len);
      continue;
    }
    if (op->port == reader.id_) {
      reader.in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      out[mine++] = c;
      continue;
    }
    // A port goes only once none of its operations is in flight (retire()), so the port of
    // any completion is here.
    const auto owner = ports_.find(op->port);
    if (owner == ports_.end()) continue;
    owner->second->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    owner->second->routed_.push_back(Port::Routed{c, false, {}});
  }
  return static_cast<int>(mine);
}

void SharedEndpoint::route_failure(const CompletionError& failure) {
  auto* op = static_cast<Operation*>(failure.context);
  if (op == nullptr) {
    // The provider names no operation: every comm on the endpoint may be affected, and what
    // state the endpoint is in nobody can say, so new comms go to another.
    broken_.store(true, std::memory_order_release);
    fail_every_port(failure);
    return;
  }
  if (op->port == 0) {
    // One of the receive buffers: a message too long for it (FI_ETRUNC), which no comm can
    // be named for, or the endpoint closing.
    if (failure.error == FI_ECANCELED) return;
    if (rationed(truncated_)) {
      log_warn("dropped a control message (%llu so far): %s",
               static_cast<unsigned long long>(truncated_), failure.reason.c_str());
    }
    repost(*op);
    return;
  }
  const auto owner = ports_.find(op->port);
  if (owner == ports_.end()) return;
  owner->second->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  owner->second->routed_.push_back(Port::Routed{{}, true, failure});
}

void SharedEndpoint::fail_every_port(const CompletionError& failure) {
  for (auto& [id, port] : ports_) {
    // (One unread failure is enough: a comm that failed polls no more, and its queue would
    // only grow.)
    if (!port->routed_.empty() && port->routed_.back().failed) continue;
    port->routed_.push_back(Port::Routed{{}, true, failure});
  }
}

void SharedEndpoint::repost(const Operation& receive) {
  std::string why;
  const ssize_t rc = receives_->try_repost(const_cast<Operation&>(receive), &why);
  if (rc == 0) return;
  if (rc == -FI_EAGAIN) {
    // Its queue holds exactly these buffers, and ofi_rxm takes one back only after it
    // reported it: one that failed (a message too long for it) is refused this way until the
    // provider progresses.  Posted again at the next read of the queue.
    unposted_.push_back(&const_cast<Operation&>(receive));
    return;
  }
  // A buffer the provider will not take back is one fewer for every comm's messages, which
  // would stop coming without a word: the comms fail instead, and new ones go elsewhere.
  broken_.store(true, std::memory_order_release);
  fail_every_port(CompletionError{nullptr, FI_EIO, "a receive buffer of the shared endpoint "
                                                  "could not be posted again (" + why + ")"});
}

void SharedEndpoint::route_message(const Operation& receive, size_t len) {
  const std::span<const uint8_t> bytes = receives_->received(receive, len);
  const std::optional<uint64_t> port = control_message_port(bytes);
  if (!port) {
    // (Rationed: a broken peer could otherwise fill the log, under the endpoint's lock.)
    if (rationed(unaddressed_)) {
      log_warn("dropped a %zu-byte control message that names no comm (not a version-%u "
               "header; %llu so far)", bytes.size(), static_cast<unsigned>(kControlVersion),
               static_cast<unsigned long long>(unaddressed_));
    }
  } else if (const auto to = ports_.find(*port); to != ports_.end()) {
    to->second->queue_message(bytes);
  } else {
    // A comm that closed (its peer's last credits or notices may still come).
    if (rationed(unaddressed_)) {
      log_info("dropped a control message for comm port %#llx, which is closed (or never "
               "was)", static_cast<unsigned long long>(*port));
    }
  }
  repost(receive);
}

SharedEndpoint::Port::~Port() { shared_->detach(*this); }

bool SharedEndpoint::Port::insert(std::span<const uint8_t> address, fi_addr_t* peer,
                                  std::string* why, PeerKind kind) {
  std::lock_guard hold(shared_->mutex_);
  std::vector<uint8_t> name(address.begin(), address.end());
  auto known = shared_->peers_.find(name);
  if (known == shared_->peers_.end()) {
    fi_addr_t inserted = FI_ADDR_UNSPEC;
    if (!shared_->endpoint_->insert(address, &inserted, why)) return false;
    if (const auto alias = shared_->peer_names_.find(inserted); alias != shared_->peer_names_.end()) {
      // Other bytes for a peer already inserted (the provider read only part of them: a peer
      // that padded its address).  Counted with the first; the provider may keep its entry
      // until the endpoint closes.
      known = shared_->peers_.find(*alias->second);
    } else {
      known = shared_->peers_.emplace(std::move(name), Peer{inserted, 0}).first;
      shared_->peer_names_[inserted] = &known->first;
    }
  }
  ++known->second.uses;
  if (kind == PeerKind::shared_endpoint) known->second.kept = true;
  peers_.push_back(known->second.address);
  *peer = known->second.address;
  return true;
}

template <typename Post>
ssize_t SharedEndpoint::Port::counted(Operation* op, Post post) {
  op->port = id_;
  // Up before the post: its completion may be read by another thread before it returns.
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  const ssize_t rc = post(*shared_->endpoint_);
  if (rc != 0) in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  return rc;
}

ssize_t SharedEndpoint::Port::send(const void* buf, size_t len, void* desc, fi_addr_t peer,
                                   Operation* op) {
  return counted(op, [&](Endpoint& e) { return e.send(buf, len, desc, peer, op); });
}

ssize_t SharedEndpoint::Port::send_with_data(const void* buf, size_t len, void* desc,
                                             uint32_t data, fi_addr_t peer, Operation* op) {
  return counted(op, [&](Endpoint& e) { return e.send_with_data(buf, len, desc, data, peer, op); });
}

ssize_t SharedEndpoint::Port::write_with_data(const void* buf, size_t len, void* desc,
                                              uint32_t data, fi_addr_t peer, uint64_t remote_addr,
                                              uint64_t key, Operation* op) {
  return counted(op, [&](Endpoint& e) {
    return e.write_with_data(buf, len, desc, data, peer, remote_addr, key, op);
  });
}

ssize_t SharedEndpoint::Port::write(const void* buf, size_t len, void* desc, fi_addr_t peer,
                                    uint64_t remote_addr, uint64_t key, Operation* op) {
  return counted(op, [&](Endpoint& e) { return e.write(buf, len, desc, peer, remote_addr, key, op); });
}

ssize_t SharedEndpoint::Port::read(void* buf, size_t len, void* desc, fi_addr_t peer,
                                   uint64_t remote_addr, uint64_t key, Operation* op) {
  return counted(op, [&](Endpoint& e) { return e.read(buf, len, desc, peer, remote_addr, key, op); });
}

int SharedEndpoint::Port::poll(std::span<Completion> out, CompletionError* error) {
  std::lock_guard hold(shared_->mutex_);
  if (overflowed_) {
    overflowed_ = false;  // said once; the comm fails with it
    error->context = nullptr;
    error->error = FI_EOVERFLOW;
    error->reason = "more than " + std::to_string(kMaxQueuedMessages) +
                    " control messages for this comm arrived unread (a broken peer)";
    return -1;
  }
  if (routed_head_ == routed_.size()) {
    const int n = shared_->read_queue(*this, out);
    if (n > 0) return n;
  }
  int result = 0;
  while (routed_head_ < routed_.size() && static_cast<size_t>(result) < out.size()) {
    Routed& next = routed_[routed_head_];
    if (next.failed) {
      if (result == 0) {  // (else on the next call, after what came before it)
        *error = std::move(next.error);
        ++routed_head_;
        result = -1;
      }
      break;
    }
    out[result++] = next.completion;
    ++routed_head_;
  }
  if (routed_head_ == routed_.size()) {
    routed_.clear();
    routed_head_ = 0;
  }
  return result;
}

void SharedEndpoint::Port::queue_message(std::span<const uint8_t> bytes) {
  if (message_count_ == messages_.size()) {
    if (messages_.size() >= kMaxQueuedMessages) {
      overflowed_ = true;
      return;
    }
    // Grown in order, so the ring's oldest message is first again.
    std::vector<Message> grown(std::max(kFirstMessageRing, 2 * messages_.size()));
    for (size_t i = 0; i < message_count_; ++i) {
      grown[i] = messages_[(message_head_ + i) % messages_.size()];
    }
    messages_ = std::move(grown);
    message_head_ = 0;
  }
  Message& m = messages_[(message_head_ + message_count_) % messages_.size()];
  m.length = static_cast<uint16_t>(std::min(bytes.size(), sizeof m.bytes));
  std::memcpy(m.bytes, bytes.data(), m.length);
  ++message_count_;
}

size_t SharedEndpoint::Port::take_message(std::span<uint8_t, kControlBufferSize> into) {
  std::lock_guard hold(shared_->mutex_);
  if (message_count_ == 0) return 0;
  const Message& m = messages_[message_head_];
  std::memcpy(into.data(), m.bytes, m.length);
  message_head_ = (message_head_ + 1) % messages_.size();
  --message_count_;
  return m.length;
}

}  // namespace hmr::nccl
