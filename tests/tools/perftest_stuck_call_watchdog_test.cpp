// A provider call that never returns (tools/hmr-perftest/stuck_call_watchdog.*): shm spun in
// fi_cq_read on a lock a stopped peer held, past any --timeout, since the waits that end the
// data phase run only between calls.  The watchdog ends the process with the reason and
// exit status 1; calls that return keep it quiet however long the run.
#include "stuck_call_watchdog.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace hmr::perftest {
namespace {

using Clock = std::chrono::steady_clock;

TEST(PerftestStuckCallWatchdogDeathTest, ACallThatNeverReturnsEndsTheProcessWithItsReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StuckCallWatchdog::prepare();
        StuckCallWatchdog watchdog(std::chrono::milliseconds(200), "server");
        watchdog.entering();  // and never left, as fi_cq_read spinning on a peer's lock
        for (;;) pause();
      },
      ::testing::ExitedWithCode(1),
      "hmr-perftest server: a libfabric call has not returned for 200 ms \\(--timeout\\)");
}

// A call stuck while the peer's connection hung up (a peer killed inside shm's progress leaves
// its lock held) ends the process at once, not at the --timeout (60 s by default: the other
// side of a killed shm peer waited that long).  The limit here is an hour: only the hang-up
// can end it.
TEST(PerftestStuckCallWatchdogDeathTest, ACallStuckWhileThePeerHungUpEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) _exit(3);
        StuckCallWatchdog::prepare();
        StuckCallWatchdog watchdog(std::chrono::hours(1), "client");
        watchdog.watch_peer(pair[0]);
        watchdog.entering();
        close(pair[1]);  // the peer is gone
        for (;;) pause();
      },
      ::testing::ExitedWithCode(1),
      "hmr-perftest client: a libfabric call waits for a peer that hung up");
}

// A peer that is there keeps a long call going: only the limit ends it.
TEST(PerftestStuckCallWatchdog, ALongCallBesideALivePeerIsNotEnded) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  {
    StuckCallWatchdog watchdog(std::chrono::seconds(10), "client");
    watchdog.watch_peer(pair[0]);
    watchdog.entering();
    const Clock::time_point start = Clock::now();
    while (Clock::now() - start < std::chrono::milliseconds(600)) {
    }
    watchdog.left();
  }
  close(pair[0]);
  close(pair[1]);
  SUCCEED();  // (the process would have ended)
}

// Calls that return, and time spent outside any call (waiting on the socket, computing a
// checksum), are never taken for a stuck call.
TEST(PerftestStuckCallWatchdog, CallsThatReturnAndTimeBetweenThemAreNotStuck) {
  StuckCallWatchdog watchdog(std::chrono::milliseconds(100), "client");
  const Clock::time_point start = Clock::now();
  while (Clock::now() - start < std::chrono::milliseconds(500)) {
    watchdog.entering();
    watchdog.left();
  }
  const Clock::time_point idle = Clock::now();
  while (Clock::now() - idle < std::chrono::milliseconds(300)) {
  }
  SUCCEED();  // (the process would have ended)
}

}  // namespace
}  // namespace hmr::perftest
