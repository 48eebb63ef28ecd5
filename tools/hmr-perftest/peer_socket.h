// The out-of-band TCP connection between hmr-perftest's server and client: one message at a
// time, each read under a deadline so a silent or slow peer ends the run with a reason
// instead of hanging it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "peer_message.h"

namespace hmr::perftest {

class PeerSocket {
 public:
  // Server: listens on `port` (0 picks one; listening_port() tells which) on all addresses.
  static std::optional<PeerSocket> listen(uint16_t port, std::string* why);
  // Server: waits up to `timeout_ms` for one client.  The socket keeps listening until
  // stop_listening(), so that a client refused at admission (admission.h) can be hung up on
  // and the next one accepted; a connection still held is closed first.
  bool accept(int timeout_ms, std::string* why);
  // Server: no more clients (a later one's connect is refused by the kernel, not queued).
  void stop_listening();
  // Closes the connection (the peer reads its end); a listening socket stays.
  void hang_up();
  // Client: connects to host:port, retrying until `timeout_ms` passes (the server may start
  // a moment later than the client).
  static std::optional<PeerSocket> connect(const std::string& host, uint16_t port, int timeout_ms,
                                           std::string* why);

  PeerSocket(PeerSocket&& other) noexcept;
  PeerSocket& operator=(PeerSocket&& other) noexcept;
  PeerSocket(const PeerSocket&) = delete;
  PeerSocket& operator=(const PeerSocket&) = delete;
  ~PeerSocket();

  uint16_t listening_port() const { return port_; }

  bool send(const std::vector<uint8_t>& message, std::string* why);
  // Whether a message (or the peer's hang-up) is waiting to be read, without blocking.
  bool readable() const;
  // Reads one message of type `expected` and returns its body, checked by decode_header.
  std::optional<std::vector<uint8_t>> receive(MessageType expected, int timeout_ms,
                                              std::string* why);
  // The same for a message that may be any of `expected` (the server of a bandwidth test
  // hears progress until done).  An error message, unless expected, ends it with its reason.
  struct Received {
    MessageType type;
    std::vector<uint8_t> body;
  };
  std::optional<Received> receive_one_of(std::initializer_list<MessageType> expected,
                                         int timeout_ms, std::string* why);
  // The connection's descriptor (-1 until a client is accepted), for a watch of its hang-up.
  int fd() const { return fd_; }

 private:
  explicit PeerSocket(int fd) : fd_(fd) {}
  bool read_exactly(uint8_t* out, size_t size, int timeout_ms, std::string* why);
  void close_fds();

  int fd_ = -1;         // the connection (or the listening socket before accept)
  int listen_fd_ = -1;  // server side until accept
  uint16_t port_ = 0;
};

}  // namespace hmr::perftest
