// How long hmr-perftest waits in its data phase: a wait for the fabric (a completion, a post
// the provider keeps refusing with EAGAIN, bytes to land) ends with a reason once --timeout
// has passed without progress, or at once when the peer speaks or hangs up on the out-of-band
// socket, where it says nothing while a block runs unless it gave up or died.  Progress (a
// completion, a ping answered) starts the deadline again, so a long run is never cut short,
// only a stalled one.
//
// A bandwidth test's server sees no completions of the client's operations, so the client's
// watch also tells the server that it still moves bytes (a Progress message every 250 ms
// while it does, whatever its own --timeout: the server's may be shorter, and is at least
// 1 s); the server gives up when the client has said nothing for its --timeout
// (session.cpp, await_client_done).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "peer_socket.h"

namespace hmr::perftest {

// "30 s", or "250 ms" for a deadline of no whole seconds (tests use those).
std::string duration_text(std::chrono::milliseconds duration);

class PeerWatch {
 public:
  // `tell_progress`: this side is the client of a bandwidth test (see above).
  PeerWatch(PeerSocket& socket, int timeout_ms, bool tell_progress = false);

  // Something moved.  Cheap (no clock read): the deadline starts again at the next check.
  void progressed() { progressed_ = true; }

  // False, with the reason, once the wait should end.  Looks at the clock and the socket only
  // every kCheckEvery calls: a system call per poll would be the latency measured.
  bool fine(std::string* why) {
    if (++calls_ % kCheckEvery != 0) return true;
    return check(why);
  }

  // From now until the watch ends, a readable socket is not the peer giving up: the peer may
  // already have sent its next message.  A latency test's server calls this before it waits
  // for the completion of a block's last write: the client sees those bytes land, and sends
  // its next barrier, before this side's completion queue reports the write.  Only the
  // deadline (and an error completion) can end such a wait.
  void expect_peer_message() { peer_may_speak_ = true; }

  static constexpr uint64_t kCheckEvery = 4096;
  static constexpr std::chrono::milliseconds kTellProgressEvery{250};

 private:
  bool check(std::string* why);
  // What the peer said, or that it hung up, once its socket turned readable.
  std::string what_the_peer_did();

  using Clock = std::chrono::steady_clock;
  PeerSocket& socket_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  bool tell_progress_;
  Clock::time_point last_told_;
  uint64_t calls_ = 0;
  uint64_t told_ = 0;
  bool progressed_ = false;
  bool peer_may_speak_ = false;
};

}  // namespace hmr::perftest
