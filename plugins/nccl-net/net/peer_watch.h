// Whether the process at the other end of a comm still exists.  A comm learns of a dead peer
// only through an operation that fails: over shm nothing ever fails (the shared queues do not
// notice), and over tcp a send comm waiting for announcements, or a recv comm waiting for data,
// has nothing outstanding towards the peer, so it waits for good (NCCL's own transports notice
// through their sockets).  The comms exchange their pid and "process space" when they connect
// (wire/control_message.h); a peer in the same space is watched through a pidfd (pidfd_open,
// Linux 5.3; else kill(pid, 0)) and the comm fails with the reason once it has exited.
//
// The process space is a hash of the host's boot id (/proc/sys/kernel/random/boot_id) and the
// pid namespace (the inode of /proc/self/ns/pid): equal only for processes whose pids name the
// same processes — the same boot of the same host, the same namespace.  A peer on another host
// or in another container is not watched (its death still shows when an operation towards it
// fails, or NCCL's own timeout).
#pragma once

#include <cstdint>

namespace hmr::nccl {

// This process's space: the hash above (0 when either part is unreadable).
uint64_t own_process_space();

class PeerWatch {
 public:
  PeerWatch() = default;
  ~PeerWatch();
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Watches `pid` when it lives in this process's space; otherwise nothing (gone() then never
  // says yes).
  static PeerWatch of(uint32_t pid, uint64_t process_space);

  // True once the peer has exited.  Cheap enough to call on every progress: it reads the clock
  // every 256 calls and asks the kernel at most every 100 ms.
  bool gone();
  bool watching() const { return pid_ != 0; }
  // Whether the peer is this process (a comm connected to a comm of its own process).
  bool is_this_process() const;
  uint32_t pid() const { return pid_; }

 private:
  bool exited_now() const;

  uint32_t pid_ = 0;
  int pidfd_ = -1;
  uint32_t calls_ = 0;
  int64_t next_look_ns_ = 0;
  bool gone_ = false;
};

// What a comm waits for after its peer was seen gone, before it counts the exit: the peer's
// last messages, or the acknowledgement of ours it took.  A peer that ends normally exits as
// soon as its side is done, with what it sent still on its way through this host's kernel,
// which on a loaded host may hand it over much later (loopback segments wait in a CPU's backlog
// until softirq work runs; the provider reads them at the next poll once they are in the
// socket).  Measured with the harness's PeerDeath.WhatASenderDelivered... under load (CI
// building beside it on 2 cores): 32 empty reads in a row (~30 us) lost four delivered messages
// 1 run in 6; 32 reads over 250 ms, 2 runs in 20; over 2 s, 0 in 20.  So the exit counts once
// kPolls progress calls in a row read nothing over at least kTime (1 s).  A killed peer is
// noticed that much later (far inside HMR_NCCL_WRITE_TIMEOUT's default 60 s; a timeout set
// below about 1.1 s fails a write to a killed peer first, as a timed-out write).  Meanwhile a
// send comm posts nothing new towards the peer; a recv comm still announces its receives.
// This is a bound on a delay, not a guarantee, so it is the rule only for a peer that ended
// without saying so (killed, crashed): a send comm that closes says how many writes and eager
// messages it delivered (send_closed, wire/control_message.h) and its recv comm waits for
// exactly those, however late they come, with the quiet lengthened to HMR_NCCL_WRITE_TIMEOUT
// (set_time) for what the count says is still missing once the sender exited.
class QuietAfterExit {
 public:
  static constexpr unsigned kPolls = 32;
  static constexpr int64_t kTimeNs = 1'000'000'000;

  // One progress call after the peer was seen gone; `arrived`: whether it read anything.
  // True once the quiet is long enough (and for as long as nothing arrives).
  bool settled(bool arrived);
  // The same at `now_ns` (steady clock), for tests.
  bool settled(bool arrived, int64_t now_ns);
  // How long the quiet must last from now on (kTimeNs until set).
  void set_time(int64_t time_ns) { time_ns_ = time_ns; }

 private:
  unsigned polls_ = 0;  // empty calls in a row
  int64_t since_ns_ = 0;  // when the first of them was
  int64_t time_ns_ = kTimeNs;
};

}  // namespace hmr::nccl
