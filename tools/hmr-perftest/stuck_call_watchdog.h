// A libfabric call that never returns.  shm's progress (fi_cq_read) spins on a lock in the
// memory it shares with the peer, and a peer stopped while it held that lock (SIGSTOP, a
// debugger) holds it for ever: seen in review tests, a server whose client was stopped
// mid-write_bw spun inside fi_cq_read past its --timeout.  No wait of the calling thread can
// end that, so a thread of its own ends the process, with the reason, once one call of the
// data path has lasted --timeout, or at once once a call has lasted a quarter of that while
// the peer's socket says it hung up (a killed shm peer left its lock held: the other side
// waited its whole --timeout, 60 s by default, for a peer known to be gone).
//
// It ends it with SIGTERM: providers that share memory catch it to remove their files from
// /dev/shm (which _exit would leave behind) and then pass it on to the handler prepare()
// installed, which exits 1, the status of any failed run.  A SIGTERM from anyone else gets
// what it got before.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace hmr::perftest {

class StuckCallWatchdog {
 public:
  // Installs the SIGTERM handler, once per process; before the provider is opened, so that
  // the provider's own handler comes first and passes the signal on to it.
  static void prepare();

  // `role`: "server" or "client", for the message.
  StuckCallWatchdog(std::chrono::milliseconds limit, std::string role);
  StuckCallWatchdog(const StuckCallWatchdog&) = delete;
  StuckCallWatchdog& operator=(const StuckCallWatchdog&) = delete;
  ~StuckCallWatchdog();

  // The connection to the peer (PeerSocket::fd()), once there is one: its hang-up ends a call
  // stuck that long at once.
  void watch_peer(int fd) { peer_fd_.store(fd, std::memory_order_relaxed); }

  // Around each provider call of the data path.  One thread makes the calls: a plain store
  // each, no clock, no read-modify-write.
  void entering() { bump(); }
  void left() { bump(); }

 private:
  void bump() { calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void run();
  // Whether the peer's socket has hung up (closed, reset): it no longer answers.
  bool peer_hung_up() const;
  // Says what the stuck call does (`what`, after "a libfabric call ") and ends the process.
  [[noreturn]] void give_up(const std::string& what) const;

  const std::chrono::milliseconds limit_;
  const std::string role_;
  std::atomic<uint64_t> calls_{0};  // odd while inside a call
  std::atomic<int> peer_fd_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace hmr::perftest
