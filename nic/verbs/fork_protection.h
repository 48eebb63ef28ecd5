// What hmr does about fork() and pinned memory, once per process: when the first verbs domain
// finds a device, before anything of it is opened or registered (docs/api.md, "Fork").  A
// process without RDMA devices is left as it was.
//
// A kernel before 5.13 does not copy pinned pages on fork: after a fork, the parent's first
// write to a registered page gives the parent a new copy while the NIC keeps reading and writing
// the old one — silent corruption.  libibverbs protects against it with ibv_fork_init(), which
// marks every registered range MADV_DONTFORK (a child then has no such pages at all).  Since
// 5.13 the kernel copies pinned pages for the child instead, and ibv_is_fork_initialized()
// (IBVERBS_1.13, rdma-core 35) answers IBV_FORK_UNNEEDED.
//
// Policy (nic_options fork=auto|init|off; the first verbs domain of the process decides, since
// ibv_fork_init cannot be undone):
//   auto  nothing where the kernel copies pinned pages or the application enabled protection
//         already (RDMAV_FORK_SAFE, its own ibv_fork_init); ibv_fork_init() where the kernel
//         needs it, as UCX does by default; where libibverbs cannot tell (before rdma-core 35),
//         nothing, with a warning.
//   init  ibv_fork_init() whatever the kernel.
//   off   nothing: the application takes care not to fork, or not to write registered memory
//         after a fork.
#pragma once

#include <string>

#include "nic/verbs/verbs_symbols.h"

namespace hmr::verbs {

enum class ForkPolicy { automatic, init, off };

struct ForkProtection {
  // "unneeded" (the kernel copies pinned pages), "enabled" (by the application or
  // RDMAV_FORK_SAFE), "initialized" (hmr called ibv_fork_init), "off" (fork=off), "unknown"
  // (libibverbs cannot say), "failed" (ibv_fork_init refused: memory was registered before).
  std::string state;
  std::string reason;
};

// Applies `policy` the first time it is called in the process; later calls return what the
// first one decided.
ForkProtection protect_against_fork(const IbverbsSymbols& verbs, ForkPolicy policy);

// What was decided in this process, or a state of "not decided" before any verbs domain.
ForkProtection fork_protection_now();

// What the first domain would decide with `policy`, without doing it (hmr-info): the states
// above, "initialized" meaning that hmr would call ibv_fork_init.
ForkProtection preview_fork_protection(const IbverbsSymbols& verbs, ForkPolicy policy);

// Tests only (a forked test child that plays a new process): forgets the decision.
void forget_fork_protection_decision();

}  // namespace hmr::verbs
