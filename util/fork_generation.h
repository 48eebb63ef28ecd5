// Which fork of the process this is, without a system call: 0 in the process that loaded hmr,
// one more in each child made by fork().  getpid() is a system call (glibc stopped caching it
// in 2.25), too dear for checks on a registration's hot path, such as "is this the process
// that initialised the device runtime" on every device hit, or "was this handle made in this
// process" on every call (util/object.h).
//
// Counted by a pthread_atfork child handler, registered when libhmr is loaded: glibc runs it in
// every child of fork().  (Not in a child of posix_spawn or vfork, which share the parent's
// memory until they exec: an increment there would land in the parent's counter.)  A child made by a raw
// clone() system call that skips glibc's fork handlers is not counted; getpid() is the answer
// there, and hmr's callers are libraries and runtimes that fork through glibc.
#pragma once

#include <atomic>
#include <cstdint>

namespace hmr {

namespace fork_generation_detail {
// Written only in a child's atfork handler, when the child has one thread; relaxed loads
// elsewhere see it (the handler runs before fork() returns in the child).
extern std::atomic<uint64_t> counted;
}  // namespace fork_generation_detail

uint64_t fork_generation();

// How many forks made this process, as counted so far: 0 until a child's handler ran, and
// in a process whose handler could not be registered.  Constant-initialised, so right even
// in static initialisers; what handles are stamped with (util/object.h).
inline uint32_t forks_counted() {
  return static_cast<uint32_t>(fork_generation_detail::counted.load(std::memory_order_relaxed));
}

}  // namespace hmr
