#include "peer_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <utility>

namespace hmr::nccl {
namespace {

constexpr uint32_t kCallsPerClockRead = 256;
constexpr int64_t kLookEveryNs = 100'000'000;  // 100 ms

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64_t own_process_space() {
  struct stat status;
  if (stat("/proc/self/ns/pid", &status) != 0) return 0;
  char boot_id[64] = {};
  const int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t got = read(fd, boot_id, sizeof boot_id - 1);
  close(fd);
  if (got <= 0) return 0;
  // FNV-1a, 64 bits, over the boot id's text and the namespace inode.
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&hash](uint8_t byte) { hash = (hash ^ byte) * 1099511628211ull; };
  for (ssize_t i = 0; i < got; ++i) mix(static_cast<uint8_t>(boot_id[i]));
  for (int shift = 0; shift < 64; shift += 8) mix(static_cast<uint8_t>(status.st_ino >> shift));
  return hash == 0 ? 1 : hash;
}

PeerWatch::~PeerWatch() {
  if (pidfd_ >= 0) close(pidfd_);
}

PeerWatch::PeerWatch(PeerWatch&& other) noexcept { *this = std::move(other); }

PeerWatch& PeerWatch::operator=(PeerWatch&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0) close(pidfd_);
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::exchange(other.pidfd_, -1);
    calls_ = other.calls_;
    next_look_ns_ = other.next_look_ns_;
    gone_ = other.gone_;
  }
  return *this;
}

PeerWatch PeerWatch::of(uint32_t pid, uint64_t process_space) {
  PeerWatch watch;
  const uint64_t own = own_process_space();
  if (pid == 0 || process_space == 0 || own == 0 || process_space != own) return watch;
  watch.pid_ = pid;
#ifdef SYS_pidfd_open
  // A pidfd names this very process: a pid reused after the peer exits cannot fool it.
  watch.pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (watch.pidfd_ < 0 && errno == ESRCH) watch.gone_ = true;  // already gone
#endif
  return watch;
}

bool PeerWatch::is_this_process() const {
  return pid_ != 0 && pid_ == static_cast<uint32_t>(getpid());
}

bool PeerWatch::exited_now() const {
  if (pidfd_ >= 0) {
    // A pidfd polls readable once its process has exited.
    pollfd entry{pidfd_, POLLIN, 0};
    return poll(&entry, 1, 0) == 1 && (entry.revents & (POLLIN | POLLHUP)) != 0;
  }
  return kill(static_cast<pid_t>(pid_), 0) != 0 && errno == ESRCH;
}

bool PeerWatch::gone() {
  if (gone_ || pid_ == 0) return gone_;
  if (++calls_ % kCallsPerClockRead != 0) return false;
  const int64_t now = now_ns();
  if (now < next_look_ns_) return false;
  next_look_ns_ = now + kLookEveryNs;
  gone_ = exited_now();
  return gone_;
}

bool QuietAfterExit::settled(bool arrived) { return settled(arrived, arrived ? 0 : now_ns()); }

bool QuietAfterExit::settled(bool arrived, int64_t now) {
  if (arrived) {
    polls_ = 0;
    return false;
  }
  if (polls_ == 0) since_ns_ = now;
  if (polls_ < kPolls) ++polls_;
  return polls_ >= kPolls && now - since_ns_ >= time_ns_;
}

}  // namespace hmr::nccl
