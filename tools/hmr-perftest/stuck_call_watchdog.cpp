#include "stuck_call_watchdog.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "peer_watch.h"

namespace hmr::perftest {
namespace {

// Set by the watchdog just before it raises SIGTERM: the handler then exits 1.
std::atomic<bool> giving_up{false};
struct sigaction previous_action;

void on_sigterm(int signal, siginfo_t*, void*) {
  if (giving_up.load()) _exit(1);
  // Not ours: what it would have been before prepare().
  sigaction(signal, &previous_action, nullptr);
  raise(signal);
}

}  // namespace

void StuckCallWatchdog::prepare() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = &on_sigterm;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_action);
  });
}

StuckCallWatchdog::StuckCallWatchdog(std::chrono::milliseconds limit, std::string role)
    : limit_(limit), role_(std::move(role)), thread_([this] { run(); }) {}

StuckCallWatchdog::~StuckCallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StuckCallWatchdog::run() {
  // Looked at four times per limit, and at least every 250 ms: a call is given up on between 1
  // and 1.25 limits in, or, with the peer gone, once it has lasted a look's period (no call
  // of the data path lasts that long while the peer is there to answer).
  const std::chrono::milliseconds period = std::clamp(
      std::chrono::milliseconds(limit_ / 4), std::chrono::milliseconds(1),
      std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t seen = calls_.load(std::memory_order_relaxed);
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    const uint64_t now_calls = calls_.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (now_calls != seen || now_calls % 2 == 0) {
      seen = now_calls;
      since = now;  // a call returned, or none is under way
    } else if (now - since >= limit_) {
      give_up("has not returned for " + duration_text(limit_) +
              " (--timeout): the provider waits for the peer (shm spins on a lock the peer "
              "holds: was it stopped?)");
    } else if (now - since >= period && peer_hung_up()) {
      give_up("waits for a peer that hung up (a peer killed inside the provider leaves shm's "
              "lock held)");
    }
  }
}

bool StuckCallWatchdog::peer_hung_up() const {
  const int fd = peer_fd_.load(std::memory_order_relaxed);
  if (fd < 0) return false;
  pollfd peer{fd, POLLRDHUP, 0};
  return ::poll(&peer, 1, 0) == 1 && (peer.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void StuckCallWatchdog::give_up(const std::string& what) const {
  std::fprintf(stderr, "hmr-perftest %s: a libfabric call %s\n", role_.c_str(), what.c_str());
  std::fflush(stderr);
  giving_up.store(true);
  kill(getpid(), SIGTERM);
  // (SIGTERM ends the process; should something hold it, this thread ends it anyway.)
  sleep(5);
  _exit(1);
}

}  // namespace hmr::perftest
