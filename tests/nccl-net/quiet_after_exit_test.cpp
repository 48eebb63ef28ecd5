// When a comm counts its peer's exit (plugins/nccl-net/net/peer_watch.h, QuietAfterExit): only
// once kPolls progress calls in a row read nothing over at least kTimeNs, with anything read
// starting the quiet again.  Times are given, not slept: the comms' own tests
// (PeerDeath.* in net_harness_test.cpp) run it on the real clock.
#include <gtest/gtest.h>

#include <cstdint>

#include "net/peer_watch.h"

namespace hmr::nccl {
namespace {

constexpr int64_t kStart = 1'000'000'000;  // an arbitrary steady-clock reading
constexpr int64_t kStep = 1'000'000;       // 1 ms between calls

// kPolls - 1 empty calls from `start`, kStep apart: none settles.
void quiet_calls_short_of_the_count(QuietAfterExit& quiet, int64_t start) {
  for (unsigned i = 0; i + 1 < QuietAfterExit::kPolls; ++i) {
    EXPECT_FALSE(quiet.settled(false, start + i * kStep)) << i;
  }
}

TEST(QuietAfterExit, NeedsTheCountAndTheTimeBoth) {
  QuietAfterExit quiet;
  quiet_calls_short_of_the_count(quiet, kStart);
  // The count reached, the time not: still waiting.
  EXPECT_FALSE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs - 1));
  EXPECT_TRUE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs));
  // And stays settled while nothing arrives.
  EXPECT_TRUE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs + kStep));

  QuietAfterExit fast;  // the time long past, the count not reached
  EXPECT_FALSE(fast.settled(false, kStart));
  for (unsigned i = 1; i + 1 < QuietAfterExit::kPolls; ++i) {
    EXPECT_FALSE(fast.settled(false, kStart + 10 * QuietAfterExit::kTimeNs)) << i;
  }
  EXPECT_TRUE(fast.settled(false, kStart + 10 * QuietAfterExit::kTimeNs));
}

TEST(QuietAfterExit, AnythingArrivingStartsTheQuietAgain) {
  QuietAfterExit quiet;
  quiet_calls_short_of_the_count(quiet, kStart);
  EXPECT_FALSE(quiet.settled(true));  // something read: count and clock start over
  const int64_t again = kStart + QuietAfterExit::kTimeNs;
  quiet_calls_short_of_the_count(quiet, again);
  EXPECT_FALSE(quiet.settled(false, again + QuietAfterExit::kTimeNs - 1));
  EXPECT_TRUE(quiet.settled(false, again + QuietAfterExit::kTimeNs));
  EXPECT_FALSE(quiet.settled(true)) << "a settled quiet that is broken is not settled";
}

TEST(QuietAfterExit, ManyEmptyCallsNeverWrapTheCount) {
  QuietAfterExit quiet;
  for (int64_t i = 0; i < 100'000; ++i) (void)quiet.settled(false, kStart);
  EXPECT_FALSE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs - 1));
  EXPECT_TRUE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs));
}

// A recv comm whose sender said how much it sent, and exited with some of it still missing,
// waits HMR_NCCL_WRITE_TIMEOUT instead of kTimeNs (recv_comm.cpp): set_time lengthens the
// quiet already under way.
TEST(QuietAfterExit, ALongerTimeHoldsTheQuietAlreadyUnderWay) {
  QuietAfterExit quiet;
  quiet_calls_short_of_the_count(quiet, kStart);
  quiet.set_time(5 * QuietAfterExit::kTimeNs);
  EXPECT_FALSE(quiet.settled(false, kStart + QuietAfterExit::kTimeNs));
  EXPECT_FALSE(quiet.settled(false, kStart + 5 * QuietAfterExit::kTimeNs - 1));
  EXPECT_TRUE(quiet.settled(false, kStart + 5 * QuietAfterExit::kTimeNs));
}

}  // namespace
}  // namespace hmr::nccl
