// hmr-perftest's waits in the data phase (tools/hmr-perftest/peer_watch.*, and Fabric's post
// and wait through it): each ends once its timeout passes without progress, or at once when
// the peer hangs up or says why it stopped; progress starts the deadline again.  Before, a
// wait for a completion or an accepted post had no end at all.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <vector>

#include "fabric.h"
#include "peer_socket.h"
#include "peer_watch.h"
#include "perftest_test_sockets.h"

namespace hmr::perftest {
namespace {

using test_support::Clock;
using test_support::connected;
using test_support::Connected;
using test_support::seconds_since;

TEST(PerftestPeerWatch, AWaitWithoutProgressEndsAtItsTimeout) {
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 200);
  std::string why;
  const Clock::time_point start = Clock::now();
  while (watch.fine(&why)) {
  }
  EXPECT_GE(seconds_since(start), 0.2);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_EQ(why, "no progress for 200 ms (--timeout): the peer stopped answering, or the fabric "
                 "cannot reach it");
}

// A long run is not cut short: only a stalled one ends.
TEST(PerftestPeerWatch, ProgressStartsTheDeadlineAgain) {
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 200);
  std::string why;
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < 0.8) {  // four timeouts, progressing all along
    watch.progressed();
    ASSERT_TRUE(watch.fine(&why)) << "after " << seconds_since(start) << " s: " << why;
  }
  while (watch.fine(&why)) {
  }
  EXPECT_NE(why.find("no progress for 200 ms"), std::string::npos) << why;
}

TEST(PerftestPeerWatch, ThePeersHangUpEndsAWaitAtOnce) {
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 600000);
  pair.server.reset();
  std::string why;
  const Clock::time_point start = Clock::now();
  while (watch.fine(&why)) {
  }
  EXPECT_LT(seconds_since(start), 60.0);
  EXPECT_EQ(why, "the peer closed the connection in the middle of a block");
}

TEST(PerftestPeerWatch, ThePeersReasonEndsAWait) {
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 600000);
  std::string why;
  ASSERT_TRUE(pair.server->send(encode(PeerError{"server: out of memory"}), &why)) << why;
  while (watch.fine(&why)) {
  }
  EXPECT_EQ(why, "the peer stopped: server: out of memory");
}

// A latency test's server waits for its block's last write to complete after the client may
// already have seen those bytes land and sent its next barrier: that message is the next
// block's, not the client giving up, and stays on the socket for the next receive.  Before,
// the wait read it as an error message and ended the run ("the peer sent message type 3
// where type 4 was due in the middle of a block"), now and then in hmr_perftest_netns.
TEST(PerftestPeerWatch, ThePeersNextMessageDoesNotEndAWaitThatExpectsIt) {
  std::string why;
  {
    Connected other = connected();
    ASSERT_TRUE(other.client);
    ASSERT_TRUE(other.server->send(encode(Done{4096}), &why)) << why;
    PeerWatch unexpecting(*other.client, 600000);
    while (unexpecting.fine(&why)) {
    }
    EXPECT_NE(why.find("where type"), std::string::npos) << why;  // read and refused
  }
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  ASSERT_TRUE(pair.server->send(encode(Done{8192}), &why)) << why;
  const Clock::time_point start = Clock::now();
  while (!pair.client->readable()) ASSERT_LT(seconds_since(start), 60.0) << "nothing arrived";
  PeerWatch expecting(*pair.client, 600000);
  expecting.expect_peer_message();
  for (uint64_t call = 0; call < 4 * PeerWatch::kCheckEvery; ++call) {
    ASSERT_TRUE(expecting.fine(&why)) << "after " << call << " calls: " << why;
  }
  std::optional<std::vector<uint8_t>> body = pair.client->receive(MessageType::done, 1000, &why);
  ASSERT_TRUE(body) << why;
  std::optional<Done> barrier = decode_done(*body, &why);
  ASSERT_TRUE(barrier) << why;
  EXPECT_EQ(barrier->value, 8192u);
}

// The server of a bandwidth test sees none of the client's completions: the client's watch
// tells it, while it progresses, and says nothing while it does not.
TEST(PerftestPeerWatch, AClientThatProgressesTellsTheServer) {
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 600000, /*tell_progress=*/true);
  std::string why;
  const Clock::time_point start = Clock::now();
  while (!pair.server->readable()) {
    ASSERT_LT(seconds_since(start), 60.0) << "no Progress message";
    watch.progressed();
    ASSERT_TRUE(watch.fine(&why)) << why;
  }
  EXPECT_GE(seconds_since(start), 0.25);  // not once per check: once per 250 ms
  std::optional<std::vector<uint8_t>> body =
      pair.server->receive(MessageType::progress, 1000, &why);
  ASSERT_TRUE(body) << why;
  std::optional<Progress> progress = decode_progress(*body, &why);
  ASSERT_TRUE(progress) << why;
  EXPECT_EQ(progress->sequence, 1u);
}

// A peer's address its provider accepts but cannot reach (TEST-NET-1, RFC 5737): tcp refuses
// the write with EAGAIN, or never completes it, for as long as one asks.
TEST(PerftestFabric, AnOperationOnAnUnreachablePeerEndsAtTheTimeout) {
  std::string why;
  std::optional<Fabric> fabric = Fabric::open("tcp", &why);
  if (!fabric) GTEST_SKIP() << "no tcp provider here: " << why;
  if (fabric->address().size() != sizeof(sockaddr_in)) {
    GTEST_SKIP() << "tcp's addresses here are not sockaddr_in";
  }
  sockaddr_in unreachable{};
  unreachable.sin_family = AF_INET;
  unreachable.sin_port = htons(9);
  ASSERT_EQ(inet_pton(AF_INET, "192.0.2.1", &unreachable.sin_addr), 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&unreachable);
  ASSERT_TRUE(fabric->insert_peer(std::vector<uint8_t>(bytes, bytes + sizeof unreachable), &why))
      << why;
  std::vector<uint8_t> buffer(64);
  fid_mr* mr = fabric->register_raw(buffer.data(), buffer.size(), FI_WRITE, 1, &why);
  ASSERT_NE(mr, nullptr) << why;
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 500);
  const Clock::time_point start = Clock::now();
  const bool moved = fabric->post_write(buffer.data(), 1, fi_mr_desc(mr), 0, 0, nullptr, nullptr,
                                        watch, &why) &&
                     fabric->wait(1, watch, &why);
  EXPECT_FALSE(moved);
  EXPECT_LT(seconds_since(start), 60.0);
  EXPECT_FALSE(why.empty());
  Fabric::close_mr(mr);
}

// Nothing in flight that will ever complete, and the peer hangs up: the wait ends at once.
TEST(PerftestFabric, AWaitEndsWhenThePeerHangsUp) {
  std::string why;
  std::optional<Fabric> fabric = Fabric::open("tcp", &why);
  if (!fabric) GTEST_SKIP() << "no tcp provider here: " << why;
  Connected pair = connected();
  ASSERT_TRUE(pair.client);
  PeerWatch watch(*pair.client, 600000);
  pair.server.reset();
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(fabric->wait(1, watch, &why));
  EXPECT_LT(seconds_since(start), 60.0);
  EXPECT_EQ(why, "waiting for a completion: the peer closed the connection in the middle of a "
                 "block");
}

}  // namespace
}  // namespace hmr::perftest
