#include "peer_process.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace hmr::nccl::test {
namespace {

constexpr uint32_t kMaxMessage = 1u << 20;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

OobChannel::~OobChannel() {
  if (fd_ >= 0) close(fd_);
}

OobChannel& OobChannel::operator=(OobChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool OobChannel::send(const std::vector<uint8_t>& bytes, std::string* why) {
  const auto len = static_cast<uint32_t>(bytes.size());
  std::vector<uint8_t> frame(reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 4);
  frame.insert(frame.end(), bytes.begin(), bytes.end());
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = std::string("out-of-band send failed: ") + std::strerror(errno);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool OobChannel::send(const std::string& text, std::string* why) {
  return send(std::vector<uint8_t>(text.begin(), text.end()), why);
}

bool OobChannel::read_exact(uint8_t* out, size_t len, Clock::time_point deadline, std::string* why) {
  size_t done = 0;
  while (done < len) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      *why = "out-of-band receive: the peer sent nothing before the deadline";
      return false;
    }
    const ssize_t n = ::recv(fd_, out + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = "out-of-band receive: the peer closed the channel (it exited or failed)";
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::vector<uint8_t>> OobChannel::receive(Clock::time_point deadline, std::string* why) {
  uint32_t len = 0;
  if (!read_exact(reinterpret_cast<uint8_t*>(&len), 4, deadline, why)) return std::nullopt;
  if (len > kMaxMessage) {
    *why = "out-of-band receive: a frame of " + std::to_string(len) + " bytes";
    return std::nullopt;
  }
  std::vector<uint8_t> bytes(len);
  if (len > 0 && !read_exact(bytes.data(), len, deadline, why)) return std::nullopt;
  return bytes;
}

std::optional<std::string> OobChannel::receive_text(Clock::time_point deadline, std::string* why) {
  auto bytes = receive(deadline, why);
  if (!bytes) return std::nullopt;
  return std::string(bytes->begin(), bytes->end());
}

std::optional<PeerProcess> PeerProcess::start(const std::vector<std::string>& argv, std::string* why) {
  std::vector<std::string> words;
  if (const char* wrapper = std::getenv("HMR_NCCL_HARNESS_PEER_WRAPPER")) {
    std::istringstream in(wrapper);
    for (std::string w; in >> w;) words.push_back(w);
  }
  words.insert(words.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (std::string& w : words) args.push_back(w.data());
  args.push_back(nullptr);

  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    *why = std::string("socketpair: ") + std::strerror(errno);
    return std::nullopt;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    *why = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    // dup2 clears close-on-exec on the new descriptor.
    if (dup2(fds[1], kPeerChannelFd) < 0) _exit(126);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  PeerProcess peer;
  peer.pid_ = pid;
  peer.channel_ = OobChannel(fds[0]);
  return peer;
}

PeerProcess::PeerProcess(PeerProcess&& other) noexcept
    : pid_(other.pid_), channel_(std::move(other.channel_)) {
  other.pid_ = -1;
}

PeerProcess::~PeerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::optional<int> PeerProcess::wait(Clock::time_point deadline) {
  if (pid_ <= 0) return std::nullopt;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    if (Clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return std::nullopt;
    }
    // Polling a child's exit: the interval bounds only how soon the result is seen.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string self_executable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  path[n] = '\0';
  return path;
}

int count_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;  // ".", ".." and the directory's own fd
}

namespace {
// "socket:[inode]" -> the tcp socket's "local->remote state" from /proc/net/tcp{,6}, if any.
std::string tcp_socket_of(const std::string& target) {
  const size_t open = target.find('['), close = target.find(']');
  if (target.rfind("socket:", 0) != 0 || open == std::string::npos || close == std::string::npos) return "";
  const std::string inode = target.substr(open + 1, close - open - 1);
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    FILE* file = std::fopen(table, "r");
    if (file == nullptr) continue;
    char line[512];
    while (std::fgets(line, sizeof line, file) != nullptr) {
      char local[64], remote[64], state[8];
      unsigned long long node = 0;
      if (std::sscanf(line, "%*d: %63s %63s %7s %*s %*s %*s %*s %*s %llu", local, remote, state, &node) == 4 &&
          std::to_string(node) == inode) {
        std::fclose(file);
        return std::string("(") + local + "->" + remote + " st " + state + ")";
      }
    }
    std::fclose(file);
  }
  return "";
}
}  // namespace

std::set<std::string> open_fd_targets() {
  std::set<std::string> targets;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return targets;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.' || std::atoi(entry->d_name) == dirfd(dir)) continue;
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    targets.insert(std::string(entry->d_name) + ":" +
                   (n > 0 ? std::string(target, static_cast<size_t>(n)) : "?"));
  }
  closedir(dir);
  return targets;
}

std::string describe_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return "(no /proc/self/fd)";
  std::string all;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    const std::string what = n > 0 ? std::string(target, static_cast<size_t>(n)) : "?";
    all += std::string(entry->d_name) + ":" + what + tcp_socket_of(what) + " ";
  }
  closedir(dir);
  return all;
}

}  // namespace hmr::nccl::test
