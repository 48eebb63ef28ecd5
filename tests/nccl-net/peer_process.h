// The other rank of a two-process test: this same binary (or another) started with fork+exec,
// joined to the parent by a socketpair that carries what NCCL's bootstrap would (the 128-byte
// listen handles, "go" signals, results).  Every wait has a deadline and fails with a reason
// instead of hanging; a peer that outlives its deadline is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hmr::nccl::test {

using Clock = std::chrono::steady_clock;

// Framed messages (u32 length, bytes) over a stream socket.
class OobChannel {
 public:
  explicit OobChannel(int fd = -1) : fd_(fd) {}
  ~OobChannel();
  OobChannel(OobChannel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OobChannel& operator=(OobChannel&& other) noexcept;
  OobChannel(const OobChannel&) = delete;
  OobChannel& operator=(const OobChannel&) = delete;

  bool send(const std::vector<uint8_t>& bytes, std::string* why);
  bool send(const std::string& text, std::string* why);
  // Waits until `deadline` for one message; nullopt and `why` on timeout or a closed peer.
  std::optional<std::vector<uint8_t>> receive(Clock::time_point deadline, std::string* why);
  std::optional<std::string> receive_text(Clock::time_point deadline, std::string* why);
  int fd() const { return fd_; }

 private:
  bool read_exact(uint8_t* out, size_t len, Clock::time_point deadline, std::string* why);
  int fd_;
};

class PeerProcess {
 public:
  // Starts `argv` (argv[0] a path) with the child's end of a socketpair as fd 3 and the
  // words of $HMR_NCCL_HARNESS_PEER_WRAPPER in front (e.g. "ip netns exec ns2 env
  // FI_TCP_IFACE=veth1" to put the peer in another network namespace).
  static std::optional<PeerProcess> start(const std::vector<std::string>& argv, std::string* why);
  PeerProcess(PeerProcess&& other) noexcept;
  ~PeerProcess();

  OobChannel& channel() { return channel_; }
  // The exit status (0 = every check passed) or nullopt if it had to be killed at `deadline`.
  std::optional<int> wait(Clock::time_point deadline);

 private:
  PeerProcess() = default;
  pid_t pid_ = -1;
  OobChannel channel_;
};

// The fd a peer finds its channel on.
inline constexpr int kPeerChannelFd = 3;

// Open file descriptors of this process (/proc/self/fd), for leak checks.
int count_open_fds();
// Each open descriptor and what it is ("5:socket:[1234](local->remote st 01) 6:anon_inode:
// [eventfd] ..."; a tcp socket with its addresses and state from /proc/net/tcp, hex), for a
// failure's message.
std::string describe_open_fds();
// Each open descriptor as "fd:target" (the listing's own directory left out), for a leak check
// that a descriptor closed meanwhile (another test's connection the provider let go late)
// does not fail: what is open after must have been open before.
std::set<std::string> open_fd_targets();

// This program's own path (/proc/self/exe), to start its peer rank with.
std::string self_executable();

}  // namespace hmr::nccl::test
