#include "peer_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

namespace hmr::perftest {
namespace {

using Clock = std::chrono::steady_clock;

bool set_why(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return false;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

int milliseconds_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd; false with a reason on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline, const char* what,
              std::string* why) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, milliseconds_left(deadline));
    if (ready > 0) return true;
    if (ready == 0) return set_why(why, std::string("timed out waiting for ") + what);
    if (errno != EINTR) return set_why(why, errno_text("poll"));
  }
}

// Connects `fd` (a fresh socket) to `address` before `deadline`: a blocking connect() waits
// as long as the kernel retries a SYN nobody answers (about two minutes), whatever --timeout
// said.  0, or the errno that ended it (ETIMEDOUT at the deadline).
int connect_before(int fd, const sockaddr* address, socklen_t length, Clock::time_point deadline) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  int error = 0;
  if (::connect(fd, address, length) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      std::string ignored;
      if (!wait_for(fd, POLLOUT, deadline, "the connection", &ignored)) {
        error = ETIMEDOUT;
      } else {
        socklen_t size = sizeof error;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
      }
    }
  }
  // (The rest of the protocol polls before each read and write, on a blocking socket.)
  if (error == 0 && ::fcntl(fd, F_SETFL, flags) != 0) error = errno;
  return error;
}

}  // namespace

std::optional<PeerSocket> PeerSocket::listen(uint16_t port, std::string* why) {
  // IPv6 for clients of both families; IPv4 alone where the host has no IPv6 (ipv6.disable=1,
  // common on clusters).
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd >= 0;
  if (!v6 && errno == EAFNOSUPPORT) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    set_why(why, errno_text("socket"));
    return std::nullopt;
  }
  PeerSocket socket(-1);
  socket.listen_fd_ = fd;
  const int on = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_storage address{};
  socklen_t length = 0;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);  // IPv4 clients too
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_any;
    in6->sin6_port = htons(port);
    length = sizeof *in6;
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&address);
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
    in4->sin_port = htons(port);
    length = sizeof *in4;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    set_why(why, errno_text(("bind to port " + std::to_string(port)).c_str()));
    return std::nullopt;
  }
  if (::listen(fd, 1) != 0) {
    set_why(why, errno_text("listen"));
    return std::nullopt;
  }
  length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  socket.port_ = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return socket;
}

bool PeerSocket::accept(int timeout_ms, std::string* why) {
  if (listen_fd_ < 0) return set_why(why, "accept on a socket that is not listening");
  hang_up();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!wait_for(listen_fd_, POLLIN, deadline, "a client to connect", why)) return false;
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return set_why(why, errno_text("accept"));
  fd_ = fd;
  const int on = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return true;
}

void PeerSocket::stop_listening() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void PeerSocket::hang_up() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<PeerSocket> PeerSocket::connect(const std::string& host, uint16_t port,
                                              int timeout_ms, std::string* why) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int resolved = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (resolved != 0) {
    set_why(why, "cannot resolve '" + host + "': " + gai_strerror(resolved));
    return std::nullopt;
  }
  std::string last_error = "no address for '" + host + "'";
  for (;;) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int error = connect_before(fd, a->ai_addr, a->ai_addrlen, deadline);
      if (error == 0) {
        ::freeaddrinfo(found);
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        return PeerSocket(fd);
      }
      last_error = "connect to " + host + ":" + service + ": " + std::strerror(error);
      ::close(fd);
    }
    if (milliseconds_left(deadline) == 0) break;
    // Not a timing assumption: the server may simply not be listening yet, so try again
    // shortly, until the caller's deadline.
    ::poll(nullptr, 0, 50);
  }
  ::freeaddrinfo(found);
  set_why(why, last_error + " (gave up after " + std::to_string(timeout_ms) + " ms)");
  return std::nullopt;
}

PeerSocket::PeerSocket(PeerSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      listen_fd_(std::exchange(other.listen_fd_, -1)),
      port_(other.port_) {}

PeerSocket& PeerSocket::operator=(PeerSocket&& other) noexcept {
  if (this != &other) {
    close_fds();
    fd_ = std::exchange(other.fd_, -1);
    listen_fd_ = std::exchange(other.listen_fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

PeerSocket::~PeerSocket() { close_fds(); }

void PeerSocket::close_fds() {
  if (fd_ >= 0) ::close(fd_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  fd_ = listen_fd_ = -1;
}

bool PeerSocket::send(const std::vector<uint8_t>& message, std::string* why) {
  if (fd_ < 0) return set_why(why, "send on a socket that is not connected");
  size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = ::send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return set_why(why, errno_text("send to peer"));
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool PeerSocket::readable() const {
  pollfd p{fd_, POLLIN, 0};
  return fd_ >= 0 && ::poll(&p, 1, 0) > 0;
}

bool PeerSocket::read_exactly(uint8_t* out, size_t size, int timeout_ms, std::string* why) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t got = 0;
  while (got < size) {
    if (!wait_for(fd_, POLLIN, deadline, "the peer's message", why)) return false;
    const ssize_t n = ::recv(fd_, out + got, size - got, 0);
    if (n == 0) {
      return set_why(why, got == 0 ? "the peer closed the connection"
                                   : "the peer closed the connection mid-message");
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      // A peer that exits with our message unread resets rather than closes.
      if (errno == ECONNRESET) return set_why(why, "the peer closed the connection (reset)");
      return set_why(why, errno_text("recv from peer"));
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::vector<uint8_t>> PeerSocket::receive(MessageType expected, int timeout_ms,
                                                        std::string* why) {
  std::optional<Received> received = receive_one_of({expected}, timeout_ms, why);
  if (!received) return std::nullopt;
  return std::move(received->body);
}

std::optional<PeerSocket::Received> PeerSocket::receive_one_of(
    std::initializer_list<MessageType> expected, int timeout_ms, std::string* why) {
  if (fd_ < 0) {
    set_why(why, "receive on a socket that is not connected");
    return std::nullopt;
  }
  uint8_t header[kPeerHeaderSize];
  if (!read_exactly(header, sizeof header, timeout_ms, why)) return std::nullopt;
  size_t body_size = 0;
  std::optional<MessageType> type = decode_header(header, &body_size, why);
  if (!type) return std::nullopt;
  const bool due = std::find(expected.begin(), expected.end(), *type) != expected.end();
  if (*type == MessageType::error && !due) {
    // The peer gave up and says why: that reason, not "the connection closed", is the news.
    std::vector<uint8_t> body(body_size);
    if (!read_exactly(body.data(), body.size(), timeout_ms, why)) return std::nullopt;
    std::optional<PeerError> error = decode_error(body, why);
    if (error) set_why(why, "the peer stopped: " + error->reason);
    return std::nullopt;
  }
  if (!due) {
    std::string names;
    for (MessageType t : expected) {
      names += (names.empty() ? "" : " or ") + std::to_string(static_cast<int>(t));
    }
    set_why(why, "the peer sent message type " + std::to_string(static_cast<int>(*type)) +
                     " where type " + names + " was due");
    return std::nullopt;
  }
  Received received{*type, std::vector<uint8_t>(body_size)};
  if (!read_exactly(received.body.data(), received.body.size(), timeout_ms, why)) {
    return std::nullopt;
  }
  return received;
}

}  // namespace hmr::perftest
