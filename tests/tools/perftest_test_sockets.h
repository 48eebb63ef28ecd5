// Test helpers for hmr-perftest's waits: a connected pair of out-of-band sockets, and time.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "peer_socket.h"

namespace hmr::perftest::test_support {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Two ends of one loopback connection, as the server and the client hold them.
struct Connected {
  std::optional<PeerSocket> server, client;
};

inline Connected connected() {
  std::string why;
  Connected pair;
  pair.server = PeerSocket::listen(0, &why);
  EXPECT_TRUE(pair.server) << why;
  if (!pair.server) return pair;
  pair.client = PeerSocket::connect("127.0.0.1", pair.server->listening_port(), 5000, &why);
  EXPECT_TRUE(pair.client) << why;
  EXPECT_TRUE(pair.server->accept(5000, &why)) << why;
  return pair;
}

}  // namespace hmr::perftest::test_support
