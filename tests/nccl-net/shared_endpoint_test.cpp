// The send comms of a device share one libfabric endpoint (plugins/nccl-net/net/
// shared_endpoint.h).  Through the plugin's own entry points (net/net_api.h), in one process
// over libfabric's tcp provider:
//  - every send comm of a device is a port on one endpoint, and closing the last one closes
//    it, leaving nothing behind;
//  - a closed comm's peers are removed from the endpoint's address vector (and with them the
//    provider's connections), so comms made and closed beside a long-lived one leave nothing;
//  - comms driven from several threads at once each get their own completions and messages,
//    whichever thread read them off the shared queue, and comms closed from several threads
//    at once close the endpoint once;
//  - a failure the provider names no operation for fails every comm on the endpoint, and new
//    comms go to another;
//  - a comm closed while a write of it is still in flight stays (its memory is what the
//    provider points into); new comms get another endpoint, and the stalled one closes with
//    the last comm open on it, which ends the write.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fi_endpoint.h>
#include <sys/mman.h>

#include "fabric/endpoint.h"
#include "net/device.h"
#include "net/listen_comm.h"
#include "net/net_api.h"
#include "net/recv_comm.h"
#include "net/send_comm.h"
#include "net/shared_endpoint.h"
#include "send_comm_probe.h"
#include "tests/hmem/fd_checks.h"

namespace hmr::nccl {

// Reports a failure on a device's newest send endpoint as its provider would, through the
// endpoint's own routing (under its lock, as a poll does).
struct SharedEndpointProbe {
  static void provider_failure(Device& device, const CompletionError& failure) {
    std::lock_guard device_lock(device.shared_mutex_);
    SharedEndpoint& endpoint = *device.shared_endpoints_.back();
    std::lock_guard lock(endpoint.mutex_);
    endpoint.route_failure(failure);
  }
  static std::vector<uint8_t> address(Device& device) {
    std::lock_guard device_lock(device.shared_mutex_);
    return device.shared_endpoints_.back()->address();
  }
};

namespace {

using Clock = std::chrono::steady_clock;

void quiet(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

struct Pair {
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
};

class SharedSendEndpoint : public ::testing::Test {
 protected:
  // The provider the comms use (tcp: ofi_rxm over it).
  virtual const char* provider() const { return "tcp"; }
  void SetUp() override {
    setenv("HMR_NCCL_PROVIDER", provider(), 1);
    ASSERT_EQ(api::init_context(&ctx_, 1, nullptr, quiet), ncclSuccess);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(api::finalize(ctx_), ncclSuccess);
    }
  }

  // A connected send and recv comm on device 0, both in this process; the listener is closed
  // once both exist, as NCCL's net transport does after its accept.
  Pair connect() {
    Pair p;
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    EXPECT_EQ(api::listen(ctx_, 0, handle, &p.listen), ncclSuccess);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while ((p.send == nullptr || p.recv == nullptr) && Clock::now() < deadline) {
      if (p.send == nullptr) {
        EXPECT_EQ(api::connect(ctx_, 0, handle, &p.send, nullptr), ncclSuccess);
      }
      if (p.recv == nullptr) {
        EXPECT_EQ(api::accept(p.listen, &p.recv, nullptr), ncclSuccess);
      }
    }
    EXPECT_TRUE(p.send != nullptr && p.recv != nullptr) << "not connected before the deadline";
    EXPECT_EQ(api::close_listen(p.listen), ncclSuccess);
    p.listen = nullptr;
    return p;
  }
  void close(Pair& p) {
    if (p.send != nullptr) {
      EXPECT_EQ(api::close_send(p.send), ncclSuccess);
    }
    if (p.recv != nullptr) {
      EXPECT_EQ(api::close_recv(p.recv), ncclSuccess);
    }
    if (p.listen != nullptr) {
      EXPECT_EQ(api::close_listen(p.listen), ncclSuccess);
    }
    p = Pair{};
  }
  Device& device(const Pair& p) { return static_cast<SendComm*>(p.send)->device(); }
  // The body of ASendCommClosedAfterItsReceiver... (below), on this fixture's provider.
  void close_send_after_its_receiver();

  void* ctx_ = nullptr;
};

// Moves `count` messages of `size` bytes with `tag` from p.send to p.recv, each filled with
// its own pattern and checked on arrival: "" or what went wrong.
std::string move_messages(const Pair& p, int tag, size_t size, int count) {
  std::vector<uint8_t> out(size), in(size);
  void* out_mh = nullptr;
  void* in_mh = nullptr;
  if (api::reg_mr(p.send, out.data(), size, NCCL_PTR_HOST, &out_mh) != ncclSuccess ||
      api::reg_mr(p.recv, in.data(), size, NCCL_PTR_HOST, &in_mh) != ncclSuccess) {
    return "regMr failed";
  }
  std::string failure;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < count && failure.empty(); ++i) {
    for (size_t b = 0; b < size; ++b) out[b] = static_cast<uint8_t>(b * 7 + static_cast<size_t>(i) + static_cast<size_t>(tag));
    std::memset(in.data(), 0, size);
    void* recv_request = nullptr;
    void* send_request = nullptr;
    void* data = in.data();
    size_t sizes = size;
    int tags = tag;
    while (recv_request == nullptr && Clock::now() < deadline) {
      if (api::irecv(p.recv, 1, &data, &sizes, &tags, &in_mh, &recv_request) != ncclSuccess) return "irecv failed";
    }
    int send_done = 0;
    int recv_done = 0;
    while ((!send_done || !recv_done) && Clock::now() < deadline) {
      if (send_request == nullptr) {
        if (api::isend(p.send, out.data(), size, tag, out_mh, &send_request) != ncclSuccess) return "isend failed";
      } else if (!send_done && api::test(send_request, &send_done, nullptr) != ncclSuccess) {
        return "test of the send failed";
      }
      if (recv_request != nullptr && !recv_done) {
        int received = 0;
        if (api::test(recv_request, &recv_done, &received) != ncclSuccess) return "test of the receive failed";
        if (recv_done && received != static_cast<int>(size)) failure = "a message of the wrong size arrived";
      }
    }
    if (!send_done || !recv_done) failure = "message " + std::to_string(i) + " did not arrive before the deadline";
    else if (in != out) failure = "message " + std::to_string(i) + " arrived with other bytes";
  }
  api::dereg_mr(p.send, out_mh);
  api::dereg_mr(p.recv, in_mh);
  return failure;
}

TEST_F(SharedSendEndpoint, EverySendCommOfADeviceIsAPortOnOneEndpoint) {
  std::vector<Pair> pairs;
  for (int i = 0; i < 6; ++i) {
    pairs.push_back(connect());
    ASSERT_FALSE(HasFailure());
  }
  Device& dev = device(pairs.front());
  EXPECT_EQ(dev.shared_endpoints().endpoints, 1u);
  EXPECT_EQ(dev.shared_endpoints().open_comms, 12u) << "6 send comms and 6 recv comms, a port each";
  // Each moves its own bytes (small ones eagerly, large ones by RMA write).
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(move_messages(pairs[i], static_cast<int>(i), i % 2 ? 100 : 200000, 3), "") << "pair " << i;
  }
  for (Pair& p : pairs) close(p);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 0u) << "the last send comm closed, and its endpoint stayed";
}

// A listen comm is a port on the device's shared endpoint too (its handle names the endpoint's
// address and the port), not an endpoint of its own: NCCL listens once per channel and peer
// before it connects any, and each listener's endpoint cost ~20 MB on tcp;ofi_rxm.  The
// endpoint closes with the last listener.
TEST_F(SharedSendEndpoint, ListenCommsArePortsOnTheSharedEndpoint) {
  const int fds_before = hmr::testing::open_fd_count();
  std::array<void*, 8> listeners{};
  int fds_with_one = 0;
  for (void*& listener : listeners) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    ASSERT_EQ(api::listen(ctx_, 0, handle, &listener), ncclSuccess);
    if (fds_with_one == 0) fds_with_one = hmr::testing::open_fd_count();
  }
  EXPECT_EQ(hmr::testing::open_fd_count(), fds_with_one) << "a later listener opened descriptors";
  Device& dev = static_cast<ListenComm*>(listeners[0])->device();
  EXPECT_EQ(dev.shared_endpoints().endpoints, 1u);
  EXPECT_EQ(dev.shared_endpoints().open_comms, listeners.size()) << "a port per listener";
  for (void* listener : listeners) EXPECT_EQ(api::close_listen(listener), ncclSuccess);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 0u) << "the last listener closed, and the endpoint stayed";
  EXPECT_EQ(hmr::testing::open_fd_count(), fds_before);
}

TEST_F(SharedSendEndpoint, ACommClosedBesideALongLivedOneLeavesNoConnectionBehind) {
  Pair keeper = connect();
  ASSERT_FALSE(HasFailure());
  // The first round may open what the provider keeps for good; later ones must not grow.
  Pair first = connect();
  ASSERT_EQ(move_messages(first, 1, 4096, 1), "");
  close(first);
  const int after_first = hmr::testing::open_fd_count();
  const size_t peers = device(keeper).shared_endpoints().peers;
  EXPECT_EQ(peers, 2u) << "the keeper's recv comm's endpoint, and the shared endpoint itself (the "
                          "keeper's listener, and its recv comm's sender)";
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    Pair p = connect();
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(move_messages(p, 1, 4096, 1), "");
    close(p);
  }
  // A connection left behind per round grows the count by kRounds at least.  The provider
  // tears connections down at its own pace, so one closed a moment ago may still be counted
  // here, or one counted after the first round may have gone since: CI saw 30 after 31 (ASan)
  // and 35 after 34 (TSan).  Up to 3 more is that; a leak in 4 rounds of the 10 is not.
  EXPECT_LT(hmr::testing::open_fd_count(), after_first + 4)
      << "closed send comms left their connections on the shared endpoint";
  EXPECT_EQ(device(keeper).shared_endpoints().endpoints, 1u);
  EXPECT_EQ(device(keeper).shared_endpoints().peers, peers) << "closed comms' peers are still inserted";
  EXPECT_EQ(move_messages(keeper, 2, 65536, 2), "") << "the long-lived comm no longer works";
  close(keeper);
}

TEST_F(SharedSendEndpoint, CommsDrivenFromThreeThreadsEachGetTheirOwnCompletions) {
  constexpr int kThreads = 3;
  std::array<Pair, kThreads> pairs;
  for (Pair& p : pairs) {
    p = connect();
    ASSERT_FALSE(HasFailure());
  }
  EXPECT_EQ(device(pairs[0]).shared_endpoints().open_comms, static_cast<size_t>(2 * kThreads));
  std::array<std::string, kThreads> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Eager (100 B), one RMA write (64 KiB), a head and a tail (1 MiB + 3).
      for (size_t size : {size_t{100}, size_t{65536}, (size_t{1} << 20) + 3}) {
        if (failures[t].empty()) failures[t] = move_messages(pairs[t], 10 + t, size, 40);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  for (Pair& p : pairs) close(p);
}

// NCCL's proxy threads close their communicators' comms at the same time: each close
// retires a port of the same endpoint, and the last one closes the endpoint, which must not
// be freed under another close still working on it (run under ASan and TSan in CI).
TEST_F(SharedSendEndpoint, SendCommsClosedFromSeveralThreadsAtOnce) {
  constexpr int kThreads = 4;
  for (int round = 0; round < 5; ++round) {
    std::array<Pair, 2 * kThreads> pairs;
    for (Pair& p : pairs) {
      p = connect();
      ASSERT_FALSE(HasFailure());
    }
    Device& dev = device(pairs[0]);
    ASSERT_EQ(dev.shared_endpoints().open_comms, 2 * pairs.size());
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        for (int i = 0; i < 2; ++i) EXPECT_EQ(api::close_send(pairs[2 * t + i].send), ncclSuccess);
      });
    }
    for (std::thread& th : threads) th.join();
    for (Pair& p : pairs) p.send = nullptr;
    EXPECT_EQ(dev.shared_endpoints().open_comms, pairs.size()) << "the recv comms; round " << round;
    for (Pair& p : pairs) close(p);
    EXPECT_EQ(dev.shared_endpoints().endpoints, 0u) << "round " << round;
  }
}

// A recv comm posts through its port on the shared endpoint (its control messages; also flush
// read-backs and eager copies, run by the harness's flush and eager-through-NIC tests), and
// its own endpoint only receives: its address vector stays empty, since nothing can be sent
// from an RDM endpoint without a peer's address, so ofi_rxm never makes that endpoint's
// transmit pool (~16.5 MB of its ~37 MB on tcp).
TEST_F(SharedSendEndpoint, ARecvCommsOwnEndpointNeverSends) {
  Pair p = connect();
  ASSERT_FALSE(HasFailure());
  // Eager (100 B), announced and written (200 000 B), and a head and a tail (1 MiB + 3).
  for (size_t size : {size_t{100}, size_t{200000}, (size_t{1} << 20) + 3}) {
    EXPECT_EQ(move_messages(p, 3, size, 20), "") << size << " bytes";
  }
  const RecvComm& recv = *static_cast<RecvComm*>(p.recv);
  EXPECT_EQ(recv.own_endpoint().addresses(), 0u) << "the recv comm sent from its own endpoint";
  EXPECT_EQ(device(p).shared_endpoints().open_comms, 2u) << "the send comm and the recv comm";
  close(p);
}

// A failure the provider reports without naming an operation (an endpoint-wide error) may
// concern any comm on the endpoint: each fails with it at its next call, and since nobody can
// say what state the endpoint is in, a new comm gets another one, which works.
TEST_F(SharedSendEndpoint, AFailureThatNamesNoOperationFailsEveryCommOnTheEndpoint) {
  std::array<Pair, 3> pairs;
  for (Pair& p : pairs) {
    p = connect();
    ASSERT_FALSE(HasFailure());
  }
  Device& dev = device(pairs[0]);
  ASSERT_EQ(dev.shared_endpoints().endpoints, 1u);
  for (size_t i = 0; i < pairs.size(); ++i) {
    ASSERT_EQ(move_messages(pairs[i], 1, 4096, 1), "") << "comm " << i << " before the failure";
  }
  SharedEndpointProbe::provider_failure(dev, CompletionError{nullptr, FI_EIO, "injected: endpoint-wide"});
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_NE(move_messages(pairs[i], 1, 4096, 1), "") << "comm " << i << " did not fail";
  }
  Pair next = connect();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(dev.shared_endpoints().endpoints, 2u) << "a new comm was put on the failed endpoint";
  EXPECT_EQ(dev.shared_endpoints().stalled, 1u);
  EXPECT_EQ(move_messages(next, 2, 100000, 2), "");
  for (Pair& p : pairs) close(p);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 1u) << "the failed endpoint stayed after its last comm";
  close(next);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 0u);
}

TEST_F(SharedSendEndpoint, ACommClosedWithAWriteInFlightStallsItsEndpointUntilTheLastCommOnItGoes) {
  Pair keeper = connect();  // keeps the endpoint open after the aborted comm closes
  Pair p = connect();
  ASSERT_FALSE(HasFailure());
  Device& dev = device(p);
  // A receive of 64 MiB announced, then never progressed again: tcp moves nothing without
  // the receiving endpoint's progress (tried: still in flight 5 s later), so the write stays
  // in flight.
  constexpr size_t kSize = size_t{64} << 20;
  std::vector<uint8_t> out(kSize, 0x5a), in(kSize);
  void* out_mh = nullptr;
  void* in_mh = nullptr;
  ASSERT_EQ(api::reg_mr(p.send, out.data(), kSize, NCCL_PTR_HOST, &out_mh), ncclSuccess);
  ASSERT_EQ(api::reg_mr(p.recv, in.data(), kSize, NCCL_PTR_HOST, &in_mh), ncclSuccess);
  void* data = in.data();
  size_t size = kSize;
  int tag = 5;
  void* recv_request = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (recv_request == nullptr && Clock::now() < deadline) {
    ASSERT_EQ(api::irecv(p.recv, 1, &data, &size, &tag, &in_mh, &recv_request), ncclSuccess);
  }
  void* send_request = nullptr;
  while (send_request == nullptr && Clock::now() < deadline) {
    ASSERT_EQ(api::isend(p.send, out.data(), kSize, tag, out_mh, &send_request), ncclSuccess);
  }
  ASSERT_NE(send_request, nullptr);
  int done = 0;
  ASSERT_EQ(api::test(send_request, &done, nullptr), ncclSuccess);
  ASSERT_EQ(done, 0) << "64 MiB went out with no progress of the receiver";
  // An abort: the comm is closed with its write in flight.
  ASSERT_EQ(api::close_send(p.send), ncclSuccess);
  p.send = nullptr;
  if (dev.shared_endpoints().stalled == 0) {
    GTEST_SKIP() << "the provider finished the write without the receiver's progress";
  }
  EXPECT_EQ(dev.shared_endpoints().endpoints, 1u);
  EXPECT_EQ(dev.shared_endpoints().open_comms, 3u) << "the keeper's comms and the aborted one's recv comm";
  // A new comm gets another endpoint, and works.
  Pair next = connect();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(dev.shared_endpoints().endpoints, 2u) << "a new comm was put on the stalled endpoint";
  EXPECT_EQ(move_messages(next, 1, 8192, 2), "");
  // The last open comms of the stalled endpoint go (the keeper's, and the aborted comm's recv
  // comm, whose control messages it carried): the endpoint closes at once (which ends the
  // aborted write), with nothing else polling it and the receiver never told.
  EXPECT_EQ(api::close_send(keeper.send), ncclSuccess);
  keeper.send = nullptr;
  EXPECT_EQ(api::close_recv(keeper.recv), ncclSuccess);
  keeper.recv = nullptr;
  EXPECT_EQ(dev.shared_endpoints().endpoints, 2u) << "the stalled endpoint closed under an open comm";
  EXPECT_EQ(api::close_recv(p.recv), ncclSuccess);
  p.recv = nullptr;
  EXPECT_EQ(dev.shared_endpoints().endpoints, 1u) << "the stalled endpoint stayed after its last comm";
  EXPECT_EQ(dev.shared_endpoints().stalled, 0u);
  api::dereg_mr(nullptr, out_mh);
  api::dereg_mr(nullptr, in_mh);
  close(next);
  close(keeper);
  close(p);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 0u);
}

// NCCL deregisters and frees a send comm's buffers before closeSend (sendProxyFree).  A tail
// the provider refused with -FI_EAGAIN, still waiting when the comm closes with a failure
// notice to let go, must not be posted by the close: drain()'s progress posted it, from
// freed memory (on tcp the kernel's copy fails or sends what was mapped there since).
TEST_F(SharedSendEndpoint, AClosingCommPostsNothingFromNcclsBuffers) {
  Pair p = connect();
  ASSERT_FALSE(HasFailure());
  auto& comm = *static_cast<SendComm*>(p.send);
  constexpr size_t kSize = (size_t{2} << 20) + 5;
  void* freed = mmap(nullptr, kSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(freed, MAP_FAILED);
  SendCommProbe::leave_tail_unposted(comm, freed, kSize);
  std::string why;
  ASSERT_TRUE(SendCommProbe::queue_failure_notice(comm, &why)) << why;
  comm.drain();
  EXPECT_EQ(SendCommProbe::unposted_tails(comm), 1u) << "the close posted a write from NCCL's freed buffer";
  SendCommProbe::forget_unposted_tails(comm);
  close(p);
  munmap(freed, kSize);
}

// Anyone who has its address may send the shared endpoint a message longer than its receive
// buffers (a broken peer, or another protocol): the provider reports the buffer truncated,
// and ofi_rxm refuses to take it back (EAGAIN) until it has progressed.  That was taken for a
// buffer lost for good, and every comm on the endpoint failed; it is posted again later, and
// the comms go on.
TEST_F(SharedSendEndpoint, AMessageTooLongForItsBuffersFailsNoComm) {
  Pair p = connect();
  ASSERT_FALSE(HasFailure());
  Device& dev = device(p);
  std::string why;
  auto stranger = Endpoint::open(dev.libfabric(), dev.info(), dev.domain(), &why);
  ASSERT_NE(stranger, nullptr) << why;
  fi_addr_t shared = FI_ADDR_UNSPEC;
  ASSERT_TRUE(stranger->insert(SharedEndpointProbe::address(dev), &shared, &why)) << why;
  std::vector<uint8_t> junk(4 * kControlBufferSize, 0xab);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(dev.registrations(), junk.data(), junk.size(), HMR_SEND, 0, 0, 0, &mr, nullptr), 0)
      << hmr_last_error();
  Operation sent;
  sent.kind = OperationKind::control_send;
  for (int i = 0; i < 3; ++i) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    bool done = false;
    ssize_t rc;
    while ((rc = fi_send(stranger->native(), junk.data(), junk.size(), hmr_mr_desc(mr), shared, &sent)) ==
               -FI_EAGAIN &&
           Clock::now() < deadline) {
      Completion c[4];
      CompletionError error;
      stranger->poll(c, &error);
      // (The shared endpoint takes the stranger's connection in its progress.)
      ASSERT_EQ(move_messages(p, 3, 8, 1), "") << "message " << i;
    }
    ASSERT_EQ(rc, 0);
    // Until the stranger's send completed (the endpoint took it in), both sides progressing.
    while (!done && Clock::now() < deadline) {
      Completion c[4];
      CompletionError error;
      const int n = stranger->poll(c, &error);
      done = n != 0;
      EXPECT_EQ(move_messages(p, 1, 100, 1), "") << "message " << i;
    }
    ASSERT_TRUE(done) << "the stranger's send never completed";
  }
  EXPECT_EQ(dev.shared_endpoints().stalled, 0u) << "the endpoint was taken for broken";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(move_messages(p, 2, 4096, 4), "") << "round " << i;
  stranger.reset();
  hmr_mr_close(mr);
  close(p);
}

// NCCL's ranks close their comms without waiting for each other, so a send comm's closeSend
// may come after its receiver's closeRecv: its send_closed (wire/control_message.h) then
// goes to an endpoint that is gone.  The close neither fails nor waits for it, and leaves no
// operation in flight behind (which would stall the shared endpoint for later comms).
TEST_F(SharedSendEndpoint, ASendCommClosedAfterItsReceiverEndsAtOnceAndLeavesNothingInFlight) {
  close_send_after_its_receiver();
}
// The same over shm, where libfabric 1.17 crashed (SIGSEGV in its send) when the send comm
// sent its send_closed to the closed endpoint of its own process.
class SharedShmEndpoint : public SharedSendEndpoint {
  const char* provider() const override { return "shm"; }
};
TEST_F(SharedShmEndpoint, ASendCommClosedAfterItsReceiverEndsAtOnceAndLeavesNothingInFlight) {
  close_send_after_its_receiver();
}

void SharedSendEndpoint::close_send_after_its_receiver() {
  Pair kept = connect();  // (keeps the shared endpoint open, so a stall would show)
  ASSERT_FALSE(HasFailure());
  Pair p = connect();
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(move_messages(p, 1, 100, 2), "");
  ASSERT_EQ(move_messages(p, 2, 200000, 2), "");
  Device& dev = device(p);
  EXPECT_EQ(api::close_recv(p.recv), ncclSuccess);
  p.recv = nullptr;
  const auto start = Clock::now();
  EXPECT_EQ(api::close_send(p.send), ncclSuccess);
  p.send = nullptr;
  std::printf("closeSend after its receiver closed: %.3f s\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  EXPECT_EQ(dev.shared_endpoints().stalled, 0u) << "the close left an operation in flight";
  EXPECT_EQ(move_messages(kept, 3, 100000, 2), "");
  close(kept);
  EXPECT_EQ(dev.shared_endpoints().endpoints, 0u);
}

}  // namespace
}  // namespace hmr::nccl
