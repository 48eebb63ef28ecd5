// Which fork of the process this is, without a system call: 0 in the process that loaded hmr,
// one more in each child made by fork().  getpid() is a system call (glibc stopped caching it
// in 2.25), too dear for checks on a registration's hot path, such as "is this the process
// that initialised the device runtime" on every device hit.
//
// Counted by a pthread_atfork child handler, registered when libhmr is loaded: glibc runs it in
// every child of fork() (and of posix_spawn/vfork, which exec at once).  A child made by a raw
// clone() system call that skips glibc's fork handlers is not counted; getpid() is the answer
// there, and hmr's callers are libraries and runtimes that fork through glibc.
#pragma once

#include <cstdint>

namespace hmr {

uint64_t fork_generation();

}  // namespace hmr
