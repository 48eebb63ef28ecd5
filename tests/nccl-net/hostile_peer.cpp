// A receiving rank that lies: it speaks the plugin's wire protocol with the plugin's own
// transport pieces (a libfabric endpoint, a control channel) but announces buffers it never
// registered, buffers larger than what it registered, and finally bytes that are no message
// at all.  The harness (net_harness_test.cpp, HostilePeer.*) starts it as its peer and drives
// a real send comm of the loaded plugin against it; this side reports over the out-of-band
// channel whether the plugin told it what failed.
//
// Steps, each started by the harness with "step <n>" and answered with "ok" or "fail: why":
//   unregistered  announce 64 KiB at an address no registration covers, with a made-up key
//   beyond        announce 1 MiB over a registration of 4 KiB (real key)
//   too-small     announce a 4 KiB buffer honestly; the harness sends 8 KiB
//   garbage       send 100 random bytes as a control message
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "fabric/endpoint.h"
#include "fabric/libfabric.h"
#include "fabric/provider_nics.h"
#include "net/control_channel.h"
#include "net/device.h"
#include "net/settings.h"
#include "peer_process.h"
#include "wire/control_message.h"
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
    if (!encode(ListenHandle{nonce, provider_tag(device_->provider()), endpoint_->address()}, out, &why)) die(why);
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
      const int n = endpoint_->poll(completions, &error);
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
  void accept_connection(uint64_t nonce, Clock::time_point deadline, uint32_t eager_max = 0,
                         uint32_t credits = 0) {
    for (;;) {
      auto bytes = next_message(deadline);
      if (!bytes && Clock::now() >= deadline) die("no connect request before the deadline");
      if (!bytes) continue;
      std::string why;
      auto message = decode_control_message(*bytes, &why);
      const auto* request = message ? std::get_if<ConnectRequest>(&*message) : nullptr;
      if (request == nullptr || request->nonce != nonce) continue;
      if (!endpoint_->insert(request->address, &peer_, &why)) die(why);
      ConnectAccept accept{nonce, endpoint_->address()};
      accept.eager_max = eager_max;
      accept.eager_credits = credits;
      send(accept);
      return;
    }
  }

  void send(const ControlMessage& m) {
    std::string why;
    if (!control_->send(m, peer_, &why)) die(why);
  }
  // Bytes that are no message at all, sent from `buffer` (registered, `desc`).
  void send_raw(void* buffer, void* desc, size_t len, Clock::time_point deadline) {
    raw_send_.kind = OperationKind::data_write;  // next_message() leaves it alone
    ssize_t rc;
    while ((rc = endpoint_->send(buffer, len, desc, peer_, &raw_send_)) == -FI_EAGAIN) {
      if (Clock::now() > deadline) die("the raw send never went out");
      next_message(Clock::now());
    }
    if (rc != 0) die("fi_send of the raw bytes failed");
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

  Device& device() { return *device_; }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<ControlChannel> control_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  Operation raw_send_;
  uint64_t writes_landed_ = 0;
  uint64_t endpoint_errors_ = 0;
};

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

  for (uint64_t nonce = 0x5eed0001;; ++nonce) {
    auto step = oob.receive_text(deadline, &why);
    if (!step) die(why);
    if (*step == "done") break;
    // Each step on a connection of its own: the handle goes out, the harness connects.
    if (!oob.send(h.listen(nonce), &why)) die(why);
    std::string result;
    if (*step == "step eager-over-offer" || *step == "step credits-never-owed") {
      // Eager lies: an accept allowing more than the sender offered, or credits returned for
      // a tag the sender never sent eagerly on.  The sender's comm fails with the reason;
      // nothing here is answered.
      const bool over = *step == "step eager-over-offer";
      h.accept_connection(nonce, deadline, over ? kMaxEagerSize : 1024, 16);
      if (!over) {
        EagerCredit credit;
        credit.count = 1;
        credit.tags[0] = TagCredit{4, 5};
        h.send(credit);
      }
      while (Clock::now() < deadline) {
        pollfd p{oob.fd(), POLLIN, 0};
        if (poll(&p, 1, 0) > 0) break;
        h.next_message(Clock::now());
      }
      if (!oob.receive_text(deadline, &why)) die(why);  // sender-done
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
      h.send(announce(1, rma_base, size_t{1} << 20, key, 2));
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
        std::mt19937_64 random(7);
        uint8_t* noise = base + 2048;
        for (size_t i = 0; i < 100; ++i) noise[i] = static_cast<uint8_t>(random());
        h.send_raw(noise, hmr_mr_desc(mr), 100, deadline);
      }
      // Until the harness has seen it: tcp moves nothing without this side progressing.
      while (Clock::now() < deadline) {
        pollfd p{oob.fd(), POLLIN, 0};
        if (poll(&p, 1, 0) > 0) break;
        h.next_message(Clock::now());
      }
      if (!oob.receive_text(deadline, &why)) die(why);  // sender-done
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
  munmap(mapping, kMapping);
  return 0;
}

}  // namespace
}  // namespace hmr::nccl::test

int main() { return hmr::nccl::test::run(); }
