// A recv comm that its connector breaks before accept() has handed it out.  The connector
// learns the recv comm's address from the accept and may send at once; when the accept's send
// completion and the connector's first messages reach the listener in one progress call, the
// comm is already failed the first time accept() looks at it.  The comm is the caller's all
// the same (the connector believes itself connected and NCCL accepts for that peer): accept()
// hands it out and its first irecv fails with the reason.  It was dropped as "a connection
// whose accept could not be delivered", and NCCL's accept loop then waited for ever.
//
// The interleaving is forced here, in one process: the connector is made of the plugin's
// transport pieces, and the recv comm's provider is progressed with polls that take no
// completion (libfabric's util CQ progresses before it reads), so the accept goes out, the
// connector answers with its lies and they arrive, all before the comm reads its queue once.
// With tcp;ofi_rxm the accept is a send deferred until the connection is made: rxm posts it
// in one progress call and reports its completion in a later one, which is how the batch
// above happens between two processes too (HostilePeer.LyingSends... hung on it in CI).
#include <gtest/gtest.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "fabric/endpoint.h"
#include "fabric/libfabric.h"
#include "fabric/provider_nics.h"
#include "net/control_channel.h"
#include "net/device.h"
#include "net/listen_comm.h"
#include "net/log.h"
#include "net/operation.h"
#include "net/recv_comm.h"
#include "net/send_comm.h"
#include "send_comm_probe.h"
#include "net/settings.h"
#include "wire/control_message.h"
#include "wire/eager_data.h"
#include "wire/listen_handle.h"

namespace hmr::nccl {

// The recv comm's insides the test drives: its control channel's queued sends go out and its
// provider progresses (a poll of no completions: its own endpoint, and the shared one its
// sends go through), while what arrives stays in its queue.
struct RecvCommProbe {
  static void progress_without_taking(RecvComm& comm) {
    std::string why;
    EXPECT_TRUE(comm.control_out().flush(&why)) << why;
    CompletionError error;
    EXPECT_EQ(comm.endpoint_->poll(std::span<Completion>(), &error), 0) << error.reason;
    EXPECT_EQ(comm.port().poll(std::span<Completion>(), &error), 0) << error.reason;
  }
};

struct ListenCommProbe {
  static void progress_without_taking(ListenComm& comm) {
    CompletionError error;
    EXPECT_EQ(comm.port().poll(std::span<Completion>(), &error), 0) << error.reason;
  }
};

namespace {

using Clock = std::chrono::steady_clock;

// The process's RLIMIT_NOFILE now (`before`), and one that leaves `spare` descriptors above
// the lowest free one: what accept() runs under in the tests below.
rlimit limit_leaving(int spare, rlimit* before) {
  EXPECT_EQ(getrlimit(RLIMIT_NOFILE, before), 0);
  const int lowest_free = dup(0);
  EXPECT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit lowered = *before;
  lowered.rlim_cur = static_cast<rlim_t>(lowest_free + spare);
  return lowered;
}

std::mutex warnings_lock;
std::vector<std::string> warnings;

void capture(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
void capture(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> hold(warnings_lock);
  warnings.emplace_back(line);
}

bool warned(const std::string& text) {
  std::lock_guard<std::mutex> hold(warnings_lock);
  for (const std::string& w : warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

// The connector: the plugin's own transport pieces, on the device's domain.
struct Connector {
  std::unique_ptr<Endpoint> endpoint;
  std::unique_ptr<ControlChannel> control;
  fi_addr_t recv_comm = FI_ADDR_UNSPEC;
  Operation lie;
};

class AcceptRace : public ::testing::Test {
 protected:
  void SetUp() override {
    set_logger(capture);
    apply_libfabric_defaults();
    std::string why;
    const Libfabric* lf = load_libfabric(&why);
    ASSERT_NE(lf, nullptr) << why;
    auto nics = find_provider_nics(*lf, "tcp", &why);
    if (!nics) GTEST_SKIP() << "no tcp provider: " << why;
    device = Device::open(*lf, std::move(nics->nics.front()), nics->provider, Settings{}, &why);
    ASSERT_NE(device, nullptr) << why;
  }
  void TearDown() override { set_logger(nullptr); }

  // Polls the connector's endpoint once: a control message's bytes, if one came.
  std::optional<std::vector<uint8_t>> poll_connector(Connector& c) {
    Completion completions[8];
    CompletionError error;
    std::string why;
    EXPECT_TRUE(c.control->flush(&why)) << why;
    const int n = c.endpoint->poll(completions, &error);
    EXPECT_GE(n, 0) << error.reason;
    std::optional<std::vector<uint8_t>> message;
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<Operation*>(completions[i].context);
      if (op == nullptr || op->kind == OperationKind::data_write) continue;
      if (op->kind == OperationKind::control_send) {
        c.control->sent(*op);
        continue;
      }
      auto span = c.control->received(*op, completions[i].len);
      message.emplace(span.begin(), span.end());
      EXPECT_TRUE(c.control->repost(*op, &why)) << why;
    }
    return message;
  }

  // As a send comm does once `bytes` is the accept: the connector's ready, to the new recv
  // comm's endpoint (accept hands the comm out only once it came).
  void say_ready(Connector& c, const std::vector<uint8_t>& bytes, uint64_t nonce) {
    std::string why;
    auto message = decode_control_message(bytes, &why);
    const auto* accept = message ? std::get_if<ConnectAccept>(&*message) : nullptr;
    if (accept == nullptr || c.recv_comm != FI_ADDR_UNSPEC) return;
    ASSERT_TRUE(c.endpoint->insert(accept->address, &c.recv_comm, &why)) << why;
    EXPECT_TRUE(c.control->send(ConnectReady{nonce}, c.recv_comm, accept->port, &why)) << why;
  }

  // A listener on the device and its handle decoded, as a connector reads it; null (and a
  // test failure) when either fails.
  std::unique_ptr<ListenComm> listen(std::optional<ListenHandle>* handle) {
    std::string why;
    std::array<uint8_t, kHandleSize> handle_bytes{};
    std::unique_ptr<ListenComm> listener;
    EXPECT_EQ(ListenComm::open(*device, handle_bytes, &listener), ncclSuccess);
    *handle = decode_listen_handle(handle_bytes, &why);
    EXPECT_TRUE(*handle) << why;
    return *handle ? std::move(listener) : nullptr;
  }

  std::unique_ptr<Device> device;
};

TEST_F(AcceptRace, ACommBrokenBeforeAcceptLooksAtItIsHandedOutAndFailsWithTheReason) {
  std::string why;
  Connector c;
  c.endpoint = Endpoint::open(device->libfabric(), device->info(), device->domain(), &why);
  ASSERT_NE(c.endpoint, nullptr) << why;
  c.control = ControlChannel::open(*device, *c.endpoint, 8, kControlBufferSize, 8, &why);
  ASSERT_TRUE(c.control && c.control->post_receives(&why)) << why;

  ConnectRequest request{0x5eed, c.endpoint->address()};
  request.eager_max = 8192;
  std::unique_ptr<RecvComm> comm;
  ASSERT_EQ(RecvComm::start(*device, request, &comm), ncclSuccess);

  // Both sides progress; only the connector takes its completions.
  auto progress_comm = [&] { RecvCommProbe::progress_without_taking(*comm); };
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::optional<ConnectAccept> accept;
  while (!accept && Clock::now() < deadline) {
    progress_comm();
    auto bytes = poll_connector(c);
    if (!bytes) continue;
    auto message = decode_control_message(*bytes, &why);
    if (message && std::holds_alternative<ConnectAccept>(*message)) accept = std::get<ConnectAccept>(*message);
  }
  ASSERT_TRUE(accept) << "the connector never got the accept";
  ASSERT_TRUE(c.endpoint->insert(accept->address, &c.recv_comm, &why)) << why;

  // Two eager messages for buffer 1 of tag 5 (no receive posted): the second breaks the comm
  // (recv_comm.cpp: "has one waiting").
  void* source = nullptr;
  ASSERT_EQ(posix_memalign(&source, 4096, 4096), 0);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(device->registrations(), source, 4096, HMR_SEND, 0, 0, 0, &mr, nullptr), 0)
      << hmr_last_error();
  c.lie.kind = OperationKind::data_write;
  for (int i = 0; i < 2; ++i) {
    ssize_t rc;
    while ((rc = fi_senddata(c.endpoint->native(), source, 64, hmr_mr_desc(mr), encode(EagerAddress{5, 1}),
                             c.recv_comm, &c.lie)) == -FI_EAGAIN &&
           Clock::now() < deadline) {
      progress_comm();
      poll_connector(c);
    }
    ASSERT_EQ(rc, 0);
  }
  // Rounds of both sides' progress carry the lies into the recv comm's queue (the comm's
  // failure below names the second one: it arrived).
  for (int round = 0; round < 200; ++round) {
    progress_comm();
    poll_connector(c);
  }

  bool accepted = false;
  EXPECT_EQ(comm->poll_accepted(&accepted), ncclSuccess) << "the comm was dropped";
  EXPECT_TRUE(accepted);
  EXPECT_TRUE(warned("has one waiting")) << "the lie was not what broke the comm";
  void* receive = nullptr;
  EXPECT_EQ(comm->irecv(0, nullptr, nullptr, nullptr, nullptr, &receive), ncclRemoteError);
  EXPECT_TRUE(warned("irecv on a recv comm that failed earlier")) << "the failure was not reported";

  comm.reset();
  hmr_mr_close(mr);
  c.control.reset();
  c.endpoint.reset();
  std::free(source);
}

// A connect request the listener cannot answer for a reason of its own (no file descriptor
// left: a container's RLIMIT_NOFILE, as memlock would refuse its registrations) fails
// accept() with the reason.  It was logged and dropped: accept() returned no comm for ever,
// and the connector (whose connect has no deadline by default) waited for ever too.  The
// limit leaves `spare` descriptors, so each step of the answer runs out in turn: the recv
// comm's endpoint (0), then ofi_rxm's socket for the connection, opened when the accept is
// sent (about 8; it was still dropped there), then none (the comm is handed out).  The limit
// holds only inside accept(); the connector (in this process, standing for another host)
// progresses with descriptors to spare.  When accept fails, the connector has been told why
// (a connect_refused naming the listener's nonce and its reason), so its connect fails too
// instead of waiting for an accept.
enum class AcceptOutcome { failed, handed_out, silent };

class AcceptWithFewDescriptors : public AcceptRace, public ::testing::WithParamInterface<int> {
 protected:
  AcceptOutcome accept_with_descriptors_left(int spare) {
    std::string why;
    std::optional<ListenHandle> handle;
    std::unique_ptr<ListenComm> listener = listen(&handle);
    if (!listener) return AcceptOutcome::silent;

    Connector c;
    c.endpoint = Endpoint::open(device->libfabric(), device->info(), device->domain(), &why);
    EXPECT_NE(c.endpoint, nullptr) << why;
    c.control = c.endpoint ? ControlChannel::open(*device, *c.endpoint, 8, kControlBufferSize, 8, &why) : nullptr;
    EXPECT_TRUE(c.control && c.control->post_receives(&why)) << why;
    fi_addr_t listen_address = FI_ADDR_UNSPEC;
    EXPECT_TRUE(c.control && c.endpoint->insert(handle->address, &listen_address, &why)) << why;
    ConnectRequest request{handle->nonce, c.endpoint ? c.endpoint->address() : std::vector<uint8_t>{}};
    request.eager_max = 8192;
    EXPECT_TRUE(c.control && c.control->send(request, listen_address, handle->port, &why)) << why;
    if (!c.control) return AcceptOutcome::silent;

    // The request reaches the listener's queue (the connection made, its bytes read) while
    // descriptors are still there to make the connection with.
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (c.control->busy() && Clock::now() < deadline) {
      ListenCommProbe::progress_without_taking(*listener);
      poll_connector(c);
    }
    EXPECT_FALSE(c.control->busy()) << "the connect request never left";
    for (int round = 0; round < 200; ++round) {
      ListenCommProbe::progress_without_taking(*listener);
      poll_connector(c);
    }

    rlimit before{};
    const rlimit lowered = limit_leaving(spare, &before);
    std::unique_ptr<RecvComm> recv;
    ncclResult_t rc = ncclSuccess;
    std::optional<ConnectRefused> refused;
    auto take_connector_message = [&] {
      auto bytes = poll_connector(c);
      if (!bytes) return;
      say_ready(c, *bytes, handle->nonce);
      auto message = decode_control_message(*bytes, &why);
      if (message && std::holds_alternative<ConnectRefused>(*message)) {
        EXPECT_FALSE(refused) << "refused twice";
        refused = std::get<ConnectRefused>(*message);
      }
    };
    // (A comm handed out takes the connection's round trips: tens of milliseconds here.)
    const auto answer_deadline = Clock::now() + std::chrono::seconds(10);
    while (rc == ncclSuccess && !recv && Clock::now() < answer_deadline) {
      EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
      rc = listener->accept(&recv);
      EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
      take_connector_message();
    }
    const AcceptOutcome outcome = rc != ncclSuccess ? AcceptOutcome::failed
                                  : recv             ? AcceptOutcome::handed_out
                                                     : AcceptOutcome::silent;
    EXPECT_TRUE(rc == ncclSuccess || rc == ncclSystemError) << rc;
    if (outcome == AcceptOutcome::failed) {
      // accept() failed once the refusal's send completed: it is on its way or here.
      while (!refused && Clock::now() < answer_deadline) take_connector_message();
      EXPECT_TRUE(refused) << "the connector was not told";
      if (refused) {
        EXPECT_EQ(refused->nonce, handle->nonce);
        EXPECT_EQ(refused->reason.rfind("accept: ", 0), 0u) << refused->reason;
      }
    } else {
      EXPECT_FALSE(refused) << "refused, yet " << (recv ? "handed out" : "silent");
    }
    recv.reset();
    listener.reset();
    c.control.reset();
    c.endpoint.reset();
    return outcome;
  }
};

TEST_P(AcceptWithFewDescriptors, ARequestTheListenerCannotAnswerFailsAccept) {
  warnings.clear();
  const AcceptOutcome outcome = accept_with_descriptors_left(GetParam());
  EXPECT_NE(outcome, AcceptOutcome::silent) << "accept neither failed nor handed out a comm:" << [] {
    std::string all;
    for (const std::string& w : warnings) all += "\n  " + w;
    return all;
  }();
  if (outcome == AcceptOutcome::failed) {
    EXPECT_TRUE(warned("accept: ")) << "no reason logged";
  }
  if (GetParam() == 0) {
    EXPECT_EQ(outcome, AcceptOutcome::failed) << "no descriptor left, yet answered";
  }
}

INSTANTIATE_TEST_SUITE_P(Spare, AcceptWithFewDescriptors, ::testing::Range(0, 48));

// The same through the plugin's own send comm: a listener with no descriptor left fails its
// accept, and the connector's connect fails with the listener's reason (by default it has no
// deadline, and waited for an accept that never came).
TEST_F(AcceptRace, ARefusedConnectFailsTheConnectorWithTheListenersReason) {
  warnings.clear();
  std::optional<ListenHandle> handle;
  std::unique_ptr<ListenComm> listener = listen(&handle);
  ASSERT_TRUE(listener);
  std::unique_ptr<SendComm> send;
  ASSERT_EQ(SendComm::start(*device, *handle, &send), ncclSuccess);
  // The request reaches the listener's queue while descriptors are there for the provider to
  // take the connection with (as in accept_with_descriptors_left).
  bool connected_comm = false;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!SendCommProbe::request_left(*send) && Clock::now() < deadline) {
    ListenCommProbe::progress_without_taking(*listener);
    ASSERT_EQ(send->poll_connected(&connected_comm), ncclSuccess);
  }
  ASSERT_TRUE(SendCommProbe::request_left(*send)) << "the connect request never left";
  for (int round = 0; round < 200; ++round) {
    ListenCommProbe::progress_without_taking(*listener);
    ASSERT_EQ(send->poll_connected(&connected_comm), ncclSuccess);
  }

  rlimit before{};
  const rlimit lowered = limit_leaving(0, &before);  // none to spare inside accept()
  std::unique_ptr<RecvComm> recv;
  ncclResult_t accepted = ncclSuccess, connected = ncclSuccess;
  while ((accepted == ncclSuccess || connected == ncclSuccess) && Clock::now() < deadline) {
    if (accepted == ncclSuccess) {
      ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
      accepted = listener->accept(&recv);
      ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
      ASSERT_FALSE(recv) << "handed out a comm with no descriptor to spare";
    }
    if (connected == ncclSuccess) {
      connected = send->poll_connected(&connected_comm);
      ASSERT_FALSE(connected_comm);
    }
  }
  EXPECT_EQ(accepted, ncclSystemError);
  EXPECT_EQ(connected, ncclRemoteError) << "the connector was never told";
  EXPECT_TRUE(warned("the listener could not make the connection for want of its own resources, "
                     "and said: \"accept: "));
  send.reset();
  listener.reset();
}

}  // namespace
}  // namespace hmr::nccl
