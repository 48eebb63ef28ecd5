// A rank that lies: it speaks the plugin's wire protocol with the plugin's own transport
// pieces (a libfabric endpoint, a control channel).  As a receiver it announces buffers it
// never registered, buffers larger than what it registered, and finally bytes that are no
// message at all; as a sender it writes parts of messages that contradict each other and
// eager messages that are none.  The harness (net_harness_test.cpp, HostilePeer.*) starts it
// as its peer and drives a real send or recv comm of the loaded plugin against it; this side
// reports over the out-of-band channel whether the plugin told it what failed.
//
// Steps, each started by the harness with "step <n>" and answered with "ok" or "fail: why":
//   unregistered  announce 64 KiB at an address no registration covers, with a made-up key
//   beyond        announce 4 MiB over a registration of 4 KiB (real key)
//   too-small     announce a 4 KiB buffer honestly; the harness sends 8 KiB
//   garbage       send 100 random bytes as a control message, then 100 behind a header naming
//                 the send comm's port
//   flood         send 400 eager credits to the send comm, more than it may hold unread
//   stale-credits once the harness sent 16 eager messages of tag 4 (all its credits), return
//                 them with two credits in the order a fabric that does not order messages
//                 may deliver them: "16 consumed", then the older "8 consumed"
// Lying sends, each started with "send <n>" and then the harness's listen handle; this side
// connects, waits for the announcement of the harness's 4 MiB receive, lies, and answers "ok"
// (or "skip" where the provider cannot carry the lie) once the harness says "receiver-done"
// (wire/write_completion.h, wire/eager_data.h):
//   head-twice        two heads of 1 MiB, each saying a tail follows
//   parts-overflow    a head of 4 MiB and a tail of 5 bytes into the 4 MiB buffer
//   wide-cq-data      a write whose CQ data has bits above the 32 the plugin sends (only
//                     where the provider carries 8 bytes: tcp, shm)
//   eager-wide-data   an eager message whose CQ data has bits above the 32 (tcp, shm)
//   eager-twice       two eager messages for the same buffer, one the harness has not posted
//   eager-far-ahead   an eager message 100 buffers ahead of the harness's postings (its
//                     credits are 32)
//   eager-flood       one eager message for each of 2100 tags the harness never posts
//   closed-short      two eager messages of a tag the harness never posts, then a send_closed
//                     saying one was delivered
//   closed-twice      two send_closed
//   closed-then-more  a send_closed counting 0, then an eager message of a tag the harness
//                     never posts
// and two honest ends as a sender whose process is gone (the connect request names the pid of
// a child that exited, so the harness's peer watch sees it gone at once):
//   closed-then-late  a send_closed counting 3, and only once the harness says "go" (after it
//                     waited longer than the quiet after an exit) three 64-byte eager messages
//                     of tag 5, bytes 0x30, 0x31, 0x32
//   closed-missing    a send_closed counting 2, and one 64-byte eager message of tag 5
// and one honest connection after a lie to the listener ("send oversize-then-connect": 1000
// bytes, more than any control message, before the connect request; "skip" on shm, whose
// 1.17 never lets a raw send of this endpoint go).
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>

#include "fabric/endpoint.h"
#include "fabric/libfabric.h"
#include "fabric/provider_nics.h"
#include "net/control_channel.h"
#include "net/device.h"
#include "net/peer_watch.h"
#include "net/settings.h"
#include "peer_process.h"
#include "wire/control_message.h"
#include "wire/eager_data.h"
#include "wire/write_completion.h"
#include "wire/listen_handle.h"

namespace hmr::nccl::test {
namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "hostile peer: %s\n", why.c_str());
  std::exit(1);
}

class Hostile {
 public:
  Hostile() {
    std::string why;
    apply_libfabric_defaults();  // as the plugin's init does
    const Libfabric* lf = load_libfabric(&why);
    if (lf == nullptr) die(why);
    const char* provider = std::getenv("HMR_NCCL_PROVIDER");
    auto nics = find_provider_nics(*lf, provider != nullptr ? provider : "", &why);
    if (!nics) die(why);
    device_ = Device::open(*lf, std::move(nics->nics.front()), nics->provider, Settings{}, &why);
    if (!device_) die(why);
  }

  // A fresh endpoint for each lie (a provider may tear the connection down over the first),
  // and the listen handle that leads to it.
  std::vector<uint8_t> listen(uint64_t nonce) {
    std::string why;
    control_.reset();
    endpoint_.reset();
    endpoint_ = Endpoint::open(device_->libfabric(), device_->info(), device_->domain(), &why);
    if (!endpoint_) die(why);
    control_ = ControlChannel::open(*device_, *endpoint_, 16, kControlBufferSize, 8, &why);
    if (!control_ || !control_->post_receives(&why)) die(why);
    endpoint_errors_ = 0;
    return handle(nonce);
  }

  std::vector<uint8_t> handle(uint64_t nonce) {
    std::array<uint8_t, kHandleSize> out{};
    std::string why;
    // (Any port: this endpoint's buffers take every message, whatever its header names.)
    if (!encode(ListenHandle{nonce, provider_tag(device_->provider()), endpoint_->address(), 1}, out, &why)) die(why);
    return std::vector<uint8_t>(out.begin(), out.end());
  }

  // Polls until a control message arrives (its bytes), a write of the sender lands here (see
  // writes_landed()), or the deadline.
  std::optional<std::vector<uint8_t>> next_message(Clock::time_point deadline) {
    Completion completions[16];
    const uint64_t landed = writes_landed_;
    // At least one pass, so next_message(Clock::now()) is a progress call.
    for (bool first = true; first || (Clock::now() < deadline && writes_landed_ == landed); first = false) {
      std::string why;
      if (!control_->flush(&why)) die(why);
      CompletionError error;
      // One completion at a time: this returns at the first message, and the rest of a batch
      // (an announcement right behind the accept) would be lost.
      const int n = endpoint_->poll(std::span<Completion>(completions, 1), &error);
      if (n < 0) {
        // What a refused write does to the connection is the provider's business (tcp tears
        // it down); it is counted, so a step can tell "the sender was refused" from silence.
        auto* op = static_cast<Operation*>(error.context);
        if (op != nullptr && op->kind == OperationKind::control_send) control_->sent(*op);
        ++endpoint_errors_;
        return std::nullopt;
      }
      for (int i = 0; i < n; ++i) {
        const bool remote_write = (completions[i].flags & FI_REMOTE_CQ_DATA) && !(completions[i].flags & FI_RECV);
        if (remote_write) {  // (its context is the provider's: not looked at)
          ++writes_landed_;
          continue;
        }
        auto* op = static_cast<Operation*>(completions[i].context);
        if (op == nullptr || op->kind == OperationKind::data_write) continue;  // raw send
        if (op->kind == OperationKind::control_send) {
          control_->sent(*op);
          continue;
        }
        auto span = control_->received(*op, completions[i].len);
        std::vector<uint8_t> bytes(span.begin(), span.end());
        if (!control_->repost(*op, &why)) die(why);
        return bytes;
      }
    }
    return std::nullopt;
  }

  // `eager_max` and `credits`: what the accept says of eager messages (net/eager.h); 0 keeps
  // every message of the plugin's sender on announcements, which the lies below need.
  // `await_ready`: false where the accept is a lie the sender refuses (it says no ready then).
  void accept_connection(uint64_t nonce, Clock::time_point deadline, uint32_t eager_max = 0,
                         uint32_t credits = 0, bool await_ready = true) {
    for (;;) {
      auto bytes = next_message(deadline);
      if (!bytes && Clock::now() >= deadline) die("no connect request before the deadline");
      if (!bytes) continue;
      std::string why;
      auto message = decode_control_message(*bytes, &why);
      const auto* request = message ? std::get_if<ConnectRequest>(&*message) : nullptr;
      if (request == nullptr || request->nonce != nonce) continue;
      if (!endpoint_->insert(request->address, &peer_, &why)) die(why);
      peer_port_ = request->port;
      ConnectAccept accept{nonce, endpoint_->address()};
      accept.eager_max = eager_max;
      accept.eager_credits = credits;
      send(accept);
      break;
    }
    // As a recv comm does, the connection is made once the sender's ready came.
    while (await_ready) {
      auto bytes = next_message(deadline);
      if (!bytes && Clock::now() >= deadline) die("no ready from the sender before the deadline");
      if (!bytes) continue;
      std::string why;
      auto message = decode_control_message(*bytes, &why);
      const auto* ready = message ? std::get_if<ConnectReady>(&*message) : nullptr;
      if (ready != nullptr && ready->nonce == nonce) return;
    }
  }

  void send(const ControlMessage& m) {
    std::string why;
    if (!control_->send(m, peer_, peer_port_, &why)) die(why);
  }
  // Progresses until every queued control message went out.
  void flush_sends(Clock::time_point deadline) {
    while (control_->busy()) {
      if (Clock::now() > deadline) die("the control messages never went out");
      next_message(Clock::now());
    }
  }
  // The send comm's port on its endpoint (where its messages must be addressed).
  uint64_t peer_port() const { return peer_port_; }
  // Posts with `post` (which answers as fi_send does), progressing while the provider is busy;
  // dies when `what` never goes out or fails to.
  template <typename Post>
  void post_until_taken(const char* what, Clock::time_point deadline, Post post) {
    ssize_t rc;
    while ((rc = post()) == -FI_EAGAIN) {
      if (Clock::now() > deadline) die(std::string(what) + " never went out");
      next_message(Clock::now());
    }
    if (rc != 0) die(std::string("posting ") + what + " failed");
  }

  // Bytes that are no message at all, sent from `buffer` (registered, `desc`).
  void send_raw(void* buffer, void* desc, size_t len, Clock::time_point deadline) {
    raw_send_.kind = OperationKind::data_write;  // next_message() leaves it alone
    post_until_taken("the raw send", deadline,
                     [&] { return endpoint_->send(buffer, len, desc, peer_, &raw_send_); });
  }

  // Waits for the sender's failure notice for `slot` until the harness says its send ended
  // ("sender-done" on `oob`), and a moment after.  "" when the notice came with `reason`;
  // "written" when the write landed instead; "nothing" when neither came (a provider that
  // tore the connection down over the refused write, or stalled this side's queue on it).
  std::string expect_failure(uint8_t slot, SendFailureReason reason, OobChannel& oob,
                             Clock::time_point deadline) {
    const uint64_t landed = writes_landed_;
    std::optional<std::string> outcome;
    std::optional<Clock::time_point> sender_done;
    while (Clock::now() < deadline) {
      auto bytes = next_message(Clock::now() + std::chrono::milliseconds(10));
      if (!outcome && writes_landed_ != landed) outcome = "written";
      if (!outcome && bytes) {
        std::string why;
        auto message = decode_control_message(*bytes, &why);
        const auto* notice = message ? std::get_if<SendFailure>(&*message) : nullptr;
        if (!message) outcome = "the sender sent an invalid control message: " + why;
        else if (notice == nullptr) outcome = "the sender sent something else than a failure notice";
        else if (notice->slot != slot) outcome = "a failure notice for slot " + std::to_string(notice->slot);
        else if (notice->reason != reason) outcome = std::string("a failure notice saying ") + describe(notice->reason);
        else outcome = "";
      }
      pollfd p{oob.fd(), POLLIN, 0};
      if (!sender_done && poll(&p, 1, 0) > 0) {
        std::string why;
        auto said = oob.receive_text(deadline, &why);
        if (!said || *said != "sender-done") die("expected sender-done from the harness");
        sender_done = Clock::now();
      }
      if (sender_done && (outcome || Clock::now() - *sender_done > std::chrono::milliseconds(300))) {
        return outcome ? *outcome : "nothing";
      }
    }
    return "the harness never said its send ended";
  }

  // The listener the harness's `handle` names, reached from a fresh endpoint (the peer now).
  std::pair<ListenHandle, fi_addr_t> reach(const std::vector<uint8_t>& handle_bytes) {
    listen(0);
    std::string why;
    if (handle_bytes.size() != kHandleSize) die("the harness's handle is not 128 bytes");
    auto handle = decode_listen_handle(std::span<const uint8_t, kHandleSize>(handle_bytes.data(), kHandleSize), &why);
    if (!handle) die("the harness's handle: " + why);
    fi_addr_t listener = FI_ADDR_UNSPEC;
    if (!endpoint_->insert(handle->address, &listener, &why)) die(why);
    peer_ = listener;  // (what send_raw sends to, until an accept names the recv comm)
    return {*handle, listener};
  }

  // Connects to the listener of the harness's `handle` as a send comm would (eager max
  // 8192 offered; `pid`: the process it says it is, 0 for none), and returns the accept.
  ConnectAccept connect_to(const std::vector<uint8_t>& handle_bytes, Clock::time_point deadline,
                           uint32_t pid = 0) {
    std::string why;
    const auto [handle, listener] = reach(handle_bytes);
    ConnectRequest request{handle.nonce, endpoint_->address()};
    request.eager_max = 8192;
    if (pid != 0) {
      request.pid = pid;
      request.process_space = own_process_space();
    }
    if (!control_->send(request, listener, handle.port, &why)) die(why);
    for (;;) {
      auto bytes = next_message(deadline);
      if (!bytes && Clock::now() >= deadline) die("no accept before the deadline");
      if (!bytes) continue;
      auto message = decode_control_message(*bytes, &why);
      const auto* accept = message ? std::get_if<ConnectAccept>(&*message) : nullptr;
      if (accept == nullptr || accept->nonce != handle.nonce) continue;
      if (!endpoint_->insert(accept->address, &peer_, &why)) die(why);
      peer_port_ = accept->port;  // (where send() addresses the recv comm)
      // (As a send comm does: the recv comm is handed to NCCL once this arrived.)
      if (!control_->send(ConnectReady{handle.nonce}, peer_, accept->port, &why)) die(why);
      return *accept;
    }
  }

  ReceiveAnnouncement wait_for_announcement(Clock::time_point deadline) {
    for (;;) {
      auto bytes = next_message(deadline);
      if (!bytes && Clock::now() >= deadline) die("no receive announcement before the deadline");
      if (!bytes) continue;
      std::string why;
      auto message = decode_control_message(*bytes, &why);
      if (const auto* a = message ? std::get_if<ReceiveAnnouncement>(&*message) : nullptr) return *a;
    }
  }

  // Posts an RMA write of `len` bytes from `source` with CQ data `data` into `target` at
  // `offset` (its outcome does not matter: the lie is in the data).
  void write(const void* source, void* desc, size_t len, uint64_t data, const AnnouncedBuffer& target,
             uint64_t offset, Clock::time_point deadline) {
    lie_.kind = OperationKind::data_write;  // next_message() leaves it alone
    post_until_taken("the lying write", deadline, [&] {
      return fi_writedata(endpoint_->native(), source, len, desc, data, peer_,
                          target.address + offset, target.key, &lie_);
    });
  }
  // An eager message of `len` bytes of `source`, with CQ data `data`.
  void send_eager(const void* source, void* desc, size_t len, uint64_t data, Clock::time_point deadline) {
    lie_.kind = OperationKind::data_write;
    post_until_taken("the lying eager message", deadline, [&] {
      return fi_senddata(endpoint_->native(), source, len, desc, data, peer_, &lie_);
    });
  }

  // Progresses (tcp moves nothing without this side's progress) until the harness says
  // something on `oob`: what it said.
  std::optional<std::string> progress_until_the_harness_speaks(OobChannel& oob, Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      pollfd p{oob.fd(), POLLIN, 0};
      if (poll(&p, 1, 0) > 0) break;
      next_message(Clock::now());
    }
    std::string why;
    return oob.receive_text(deadline, &why);
  }

  Device& device() { return *device_; }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t peer_port_ = 0;
  Operation raw_send_;
  Operation lie_;
  uint64_t writes_landed_ = 0;
  uint64_t endpoint_errors_ = 0;
};

// The pid of a process that has exited (a child that ended at once, reaped).
uint32_t exited_pid() {
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) _exit(0);
  int status = 0;
  if (waitpid(child, &status, 0) != child) die("waitpid");
  return static_cast<uint32_t>(child);
}

ReceiveAnnouncement announce(uint8_t slot, uint64_t address, uint64_t size, uint64_t key, int32_t tag) {
  ReceiveAnnouncement a;
  a.slot = slot;
  a.generation = 1;
  a.count = 1;
  a.buffers[0] = AnnouncedBuffer{address, size, key, tag};
  return a;
}

int run() {
  OobChannel oob(kPeerChannelFd);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  Hostile h;
  std::string why;

  // A mapping whose first 4 KiB are registered; the rest is there so a write a provider lets
  // past the registration lands in memory of ours, where it is seen, not in the heap.
  constexpr size_t kMapping = size_t{4} << 20;
  void* mapping = mmap(nullptr, kMapping, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) die("mmap");
  auto* base = static_cast<uint8_t*>(mapping);
  hmr_mr* mr = nullptr;
  if (hmr_mr_reg(h.device().registrations(), base, 4096,
                 HMR_REMOTE_WRITE | HMR_REMOTE_READ | HMR_RECV | HMR_SEND, 0, 0, 0, &mr, nullptr) != 0) {
    die(std::string("hmr_mr_reg: ") + hmr_last_error());
  }
  const uint64_t key = hmr_mr_key(mr);
  const uint64_t rma_base = h.device().virtual_addressing() ? reinterpret_cast<uintptr_t>(base) : 0;
  // shm (libfabric 1.17) checks keys on the target's side only for what it carries through
  // its own buffers ("ofi_mr_map_verify ... out of registered range" in the target's log); a
  // write it copies across processes directly is not checked: there a lie may only make the
  // liar's own memory written.  Every other provider must refuse the write.
  const bool may_land = h.device().provider() == "shm";
  // The lying sends' source bytes (what they carry does not matter; their CQ data does).
  void* source = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (source == MAP_FAILED) die("mmap");
  hmr_mr* source_mr = nullptr;
  if (hmr_mr_reg(h.device().registrations(), source, 4096, HMR_WRITE | HMR_SEND, 0, 0, 0, &source_mr,
                 nullptr) != 0) {
    die(std::string("hmr_mr_reg: ") + hmr_last_error());
  }
  void* source_desc = hmr_mr_desc(source_mr);

  for (uint64_t nonce = 0x5eed0001;; ++nonce) {
    auto step = oob.receive_text(deadline, &why);
    if (!step) die(why);
    if (*step == "done") break;
    if (*step == "send oversize-then-connect") {
      // The junk from one endpoint, and once the harness saw it dropped, the connection from
      // another (what a provider does to the connection that carried junk is its business).
      auto handle = oob.receive(deadline, &why);
      if (!handle) die(why);
      const bool skip = h.device().provider() == "shm";
      if (!oob.send(skip ? "skip" : "junk", &why)) die(why);
      if (!skip) {
        h.reach(*handle);
        h.send_raw(source, source_desc, 1000, deadline);
        auto seen = h.progress_until_the_harness_speaks(oob, deadline);
        if (!seen || *seen != "junk-seen") die("expected junk-seen from the harness");
      }
      h.connect_to(*handle, deadline);
      if (!h.progress_until_the_harness_speaks(oob, deadline)) die("no receiver-done");
      if (!oob.send("ok", &why)) die(why);
      continue;
    }
    if (step->rfind("send ", 0) == 0) {
      const std::string lie = step->substr(5);
      auto handle = oob.receive(deadline, &why);
      if (!handle) die(why);
      const bool gone = lie == "closed-then-late" || lie == "closed-missing";
      h.connect_to(*handle, deadline, gone ? exited_pid() : 0);
      std::string answer = "ok";
      auto part = [](const ReceiveAnnouncement& a, WritePart p, uint32_t value) {
        return encode(WriteCompletion{a.slot, a.generation, 0, p, value});
      };
      if (lie == "eager-wide-data") {
        if (h.device().info()->domain_attr->cq_data_size < 8) answer = "skip";  // see wide-cq-data
        h.send_eager(source, source_desc, 64, encode(EagerAddress{5, 0}) | uint64_t{1} << 40, deadline);
      } else if (lie == "eager-twice") {
        // Buffer 1 of tag 5, which the harness never posts (its receive is buffer 0).
        h.send_eager(source, source_desc, 64, encode(EagerAddress{5, 1}), deadline);
        h.send_eager(source, source_desc, 64, encode(EagerAddress{5, 1}), deadline);
      } else if (lie == "eager-far-ahead") {
        h.send_eager(source, source_desc, 64, encode(EagerAddress{5, 100}), deadline);
      } else if (lie == "eager-flood") {
        for (int32_t tag = 1000; tag < 3100; ++tag) {
          h.send_eager(source, source_desc, 64, encode(EagerAddress{tag, 0}), deadline);
        }
      } else if (lie == "closed-short") {
        h.send_eager(source, source_desc, 64, encode(EagerAddress{6, 0}), deadline);
        h.send_eager(source, source_desc, 64, encode(EagerAddress{6, 1}), deadline);
        h.send(SendClosed{1});
      } else if (lie == "closed-then-more") {
        h.send(SendClosed{0});
        h.flush_sends(deadline);
        h.send_eager(source, source_desc, 64, encode(EagerAddress{6, 0}), deadline);
      } else if (lie == "closed-twice") {
        h.send(SendClosed{5});
        h.send(SendClosed{5});
      } else if (lie == "closed-then-late" || lie == "closed-missing") {
        const bool late = lie == "closed-then-late";
        h.send(SendClosed{late ? 3u : 2u});
        if (late) {
          auto go = h.progress_until_the_harness_speaks(oob, deadline);
          if (!go || *go != "go") die("expected go from the harness");
        }
        auto* bytes = static_cast<uint8_t*>(source);
        for (uint32_t m = 0; m < (late ? 3u : 1u); ++m) {
          std::memset(bytes + m * 64, 0x30 + static_cast<int>(m), 64);
          h.send_eager(bytes + m * 64, source_desc, 64, encode(EagerAddress{5, m}), deadline);
        }
      } else {
        const ReceiveAnnouncement a = h.wait_for_announcement(deadline);
        const AnnouncedBuffer& b = a.buffers[0];
        if (lie == "head-twice") {
          h.write(source, source_desc, 1, part(a, WritePart::head_then_tail, 1), b, 0, deadline);
          h.write(source, source_desc, 1, part(a, WritePart::head_then_tail, 1), b, 0, deadline);
        } else if (lie == "parts-overflow") {
          h.write(source, source_desc, 1, part(a, WritePart::head_then_tail, 4), b, 0, deadline);
          h.write(source, source_desc, 1, part(a, WritePart::tail, 5), b, 1, deadline);
        } else if (lie == "wide-cq-data") {
          // A provider that carries 32 bits drops the high ones (verbs' imm_data), and the
          // write is an honest one of 1 byte: "skip".
          if (h.device().info()->domain_attr->cq_data_size < 8) answer = "skip";
          h.write(source, source_desc, 1, part(a, WritePart::whole, 1) | uint64_t{1} << 40, b, 0, deadline);
        } else {
          answer = "fail: unknown lie " + lie;
        }
      }
      auto done = h.progress_until_the_harness_speaks(oob, deadline);
      if (!done || *done != "receiver-done") die("expected receiver-done from the harness");
      if (!oob.send(answer, &why)) die(why);
      continue;
    }
    // Each step on a connection of its own: the handle goes out, the harness connects.
    if (!oob.send(h.listen(nonce), &why)) die(why);
    std::string result;
    if (*step == "step flood") {
      // More control messages for the harness's send comm than it may hold unread (the
      // harness lets another comm read them off the shared endpoint meanwhile); "flooded"
      // once all went out.
      h.accept_connection(nonce, deadline);
      // Once the harness's connect returned (before, its connect's progress would read them).
      auto connected = h.progress_until_the_harness_speaks(oob, deadline);
      if (!connected || *connected != "connected") die("expected connected from the harness");
      EagerCredit credit;
      credit.count = 1;
      credit.tags[0] = TagCredit{7, 0};
      for (int i = 0; i < 400; ++i) h.send(credit);
      h.flush_sends(deadline);
      if (!oob.send(std::string("flooded"), &why)) die(why);
      if (!h.progress_until_the_harness_speaks(oob, deadline)) die("no sender-done");
      if (!oob.send("ok", &why)) die(why);
      continue;
    }
    if (*step == "step stale-credits") {
      h.accept_connection(nonce, deadline, 1024, 16);
      auto sent = h.progress_until_the_harness_speaks(oob, deadline);
      if (!sent || *sent != "sent") die("expected sent from the harness");
      for (const uint32_t consumed : {16u, 8u}) {
        EagerCredit credit;
        credit.count = 1;
        credit.tags[0] = TagCredit{4, consumed};
        h.send(credit);
      }
      h.flush_sends(deadline);
      if (!oob.send(std::string("credited"), &why)) die(why);
      if (!h.progress_until_the_harness_speaks(oob, deadline)) die("no sender-done");
      if (!oob.send("ok", &why)) die(why);
      continue;
    }
    if (*step == "step eager-over-offer" || *step == "step credits-never-owed") {
      // Eager lies: an accept allowing more than the sender offered, or credits returned for
      // a tag the sender never sent eagerly on.  The sender's comm fails with the reason;
      // nothing here is answered.
      const bool over = *step == "step eager-over-offer";
      h.accept_connection(nonce, deadline, over ? kMaxEagerSize : 1024, 16, /*await_ready=*/!over);
      if (!over) {
        EagerCredit credit;
        credit.count = 1;
        credit.tags[0] = TagCredit{4, 5};
        h.send(credit);
      }
      if (!h.progress_until_the_harness_speaks(oob, deadline)) die("no sender-done");
      if (!oob.send("ok", &why)) die(why);
      continue;
    }
    h.accept_connection(nonce, deadline);
    if (*step == "step unregistered") {
      // Past the registered 4 KiB, in the unregistered part of the mapping, with a key that
      // names nothing.
      h.send(announce(0, rma_base + (size_t{2} << 20), 65536, key ^ 0x5a5a5a5a5a5aull, 1));
      result = h.expect_failure(0, SendFailureReason::write_failed, oob, deadline);
    } else if (*step == "step beyond") {
      // (The harness sends 2 MiB + 5 bytes: a head and a tail, both refused, one notice.)
      h.send(announce(1, rma_base, size_t{4} << 20, key, 2));
      result = h.expect_failure(1, SendFailureReason::write_failed, oob, deadline);
    } else if (*step == "step too-small") {
      h.send(announce(2, rma_base, 4096, key, 3));
      result = h.expect_failure(2, SendFailureReason::too_large, oob, deadline);
    } else if (*step == "step garbage") {
      if (may_land) {
        // shm (1.17) leaves a raw fi_send from this endpoint at -FI_EAGAIN for good; there the
        // nonsense is a well-formed message no send comm ever expects.
        h.send(ConnectRequest{nonce, std::vector<uint8_t>(16, 0x42)});
      } else {
        // First noise that names no comm (the shared endpoint drops it, with a warning), then
        // noise behind a header naming the send comm's port (its comm fails).
        std::mt19937_64 random(7);
        uint8_t* noise = base + 2048;
        for (size_t i = 0; i < 100; ++i) noise[i] = static_cast<uint8_t>(random());
        noise[0] = 0;  // (not the magic's first byte)
        h.send_raw(noise, hmr_mr_desc(mr), 100, deadline);
        uint8_t* headed = base + 3072;
        for (size_t i = 0; i < 100; ++i) headed[i] = static_cast<uint8_t>(random());
        uint8_t header[16] = {'H', 'M', 'R', 'C', static_cast<uint8_t>(kControlVersion),
                              static_cast<uint8_t>(kControlVersion >> 8), 0x77, 0x77};
        for (int i = 0; i < 8; ++i) header[8 + i] = static_cast<uint8_t>(h.peer_port() >> (8 * i));
        std::memcpy(headed, header, sizeof header);
        h.send_raw(headed, hmr_mr_desc(mr), 100, deadline);
      }
      // Until the harness has seen it.
      if (!h.progress_until_the_harness_speaks(oob, deadline)) die("no sender-done");
    } else {
      result = "unknown step " + *step;
    }
    if (result == "written" && !may_land) result = "the write landed (the provider should have refused it)";
    const std::string answer = result.empty() ? "ok"
                               : result == "written" || result == "nothing" ? "ok " + result
                                                                            : "fail: " + result;
    if (!oob.send(answer, &why)) die(why);
  }
  hmr_mr_close(mr);
  hmr_mr_close(source_mr);
  munmap(mapping, kMapping);
  munmap(source, 4096);
  return 0;
}

}  // namespace
}  // namespace hmr::nccl::test

int main() { return hmr::nccl::test::run(); }
