// write_bw's end on the target (tools/hmr-perftest/landing.*): a provider that completes
// writes before their bytes land (net) made the check fail when the target read its buffer at
// once, as it did; now it reads again, progressing in between, until the bytes are there.
#include "landing.h"

#include <gtest/gtest.h>

#include <string>

#include "peer_watch.h"
#include "perftest_test_sockets.h"

namespace hmr::perftest {
namespace {

using test_support::Clock;
using test_support::connected;
using test_support::Connected;
using test_support::seconds_since;

TEST(PerftestLanding, TheTargetWaitsForBytesStillOnTheirWay) {
  Connected pair = connected();
  ASSERT_TRUE(pair.server);
  PeerWatch watch(*pair.server, 600000);
  uint64_t polls = 0;
  std::string why;
  // The bytes land after the 50000th poll.
  const uint64_t held = await_landing(
      42, [&] { return polls >= 50000 ? uint64_t{42} : uint64_t{7}; },
      [&](std::string*) { return ++polls > 0; }, watch, &why);
  EXPECT_EQ(held, 42u) << why;
  EXPECT_GE(polls, 50000u);
}

TEST(PerftestLanding, BytesThatNeverLandEndTheWaitAtTheTimeout) {
  Connected pair = connected();
  ASSERT_TRUE(pair.server);
  PeerWatch watch(*pair.server, 200);
  std::string why;
  const Clock::time_point start = Clock::now();
  const uint64_t held = await_landing(
      42, [] { return uint64_t{7}; }, [](std::string*) { return true; }, watch, &why);
  EXPECT_EQ(held, 7u);
  EXPECT_LT(seconds_since(start), 60.0);
  EXPECT_NE(why.find("no progress for 200 ms"), std::string::npos) << why;
}

// Bytes that keep landing (the checksum changes) are progress: the wait goes on past the
// timeout, as long as they do.
TEST(PerftestLanding, BytesStillLandingKeepTheWaitGoing) {
  Connected pair = connected();
  ASSERT_TRUE(pair.server);
  PeerWatch watch(*pair.server, 200);
  std::string why;
  const Clock::time_point start = Clock::now();
  const uint64_t held = await_landing(
      42,
      [&] {
        const double s = seconds_since(start);
        return s >= 0.8 ? uint64_t{42} : static_cast<uint64_t>(s * 1000) + 100;  // changes
      },
      [](std::string*) { return true; }, watch, &why);
  EXPECT_EQ(held, 42u) << why;
}

}  // namespace
}  // namespace hmr::perftest
