#include "nic/verbs/fork_protection.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "util/log.h"

namespace hmr::verbs {
namespace {

std::mutex decision_mutex;
bool decided = false;
ForkProtection decision;

// `apply` false: what would be decided, ibv_fork_init not called (and assumed to succeed).
ForkProtection decide(const IbverbsSymbols& verbs, ForkPolicy policy, bool apply) {
  if (policy == ForkPolicy::off) {
    return {"off", "fork=off: hmr leaves fork safety to the application (a write to a "
                   "registered page after fork() can detach it from the NIC on kernels before "
                   "5.13)"};
  }
  int kernel = -1;
  if (verbs.is_fork_initialized != nullptr) kernel = verbs.is_fork_initialized();
  if (kernel == IBV_FORK_UNNEEDED) {
    return {"unneeded", "the kernel copies pinned pages on fork (5.13 or newer: "
                        "ibv_is_fork_initialized says IBV_FORK_UNNEEDED)"};
  }
  if (kernel == IBV_FORK_ENABLED) {
    return {"enabled", "fork protection was already on (RDMAV_FORK_SAFE or the application's "
                       "ibv_fork_init): registered ranges are MADV_DONTFORK"};
  }
  if (kernel < 0 && policy == ForkPolicy::automatic) {
    return {"unknown", "libibverbs lacks ibv_is_fork_initialized (rdma-core before 35), so "
                       "whether the kernel copies pinned pages on fork is unknown; set "
                       "RDMAV_FORK_SAFE=1 or nic_options fork=init if this process forks"};
  }
  if (!apply) {
    return {"initialized", "the kernel does not copy pinned pages on fork, so hmr's first verbs "
                           "domain calls ibv_fork_init: registered ranges become MADV_DONTFORK "
                           "(a forked child has none of those pages)"};
  }
  // (With protection on, libibverbs MADV_DONTFORKs each registered range on 4 KiB bounds unless
  // RDMAV_HUGEPAGES_SAFE is set, which the kernel refuses inside a hugetlb mapping.  hmr does
  // not set it: it makes every registration of the process, the application's own included,
  // read /proc/self/smaps (ibv_fork_init(3): "further overhead"); docs/api.md tells users of
  // huge pages to set it.)
  const int err = verbs.fork_init();
  if (err != 0) {
    return {"failed", std::string("ibv_fork_init failed (") + std::strerror(err) +
                          "): memory was registered before hmr's first domain; set "
                          "RDMAV_FORK_SAFE=1 before the program starts"};
  }
  return {"initialized", "hmr called ibv_fork_init: registered ranges are MADV_DONTFORK, so a "
                         "forked child has none of those pages (the kernel does not copy "
                         "pinned pages on fork)"};
}

}  // namespace

ForkProtection protect_against_fork(const IbverbsSymbols& verbs, ForkPolicy policy) {
  const std::lock_guard<std::mutex> lock(decision_mutex);
  if (!decided) {
    decision = decide(verbs, policy, /*apply=*/true);
    decided = true;
    const LogLevel level = decision.state == "unknown" || decision.state == "failed"
                               ? LogLevel::warn
                               : LogLevel::info;
    log_message(level, "verbs fork protection: %s (%s)", decision.state.c_str(),
                decision.reason.c_str());
  }
  return decision;
}

ForkProtection fork_protection_now() {
  const std::lock_guard<std::mutex> lock(decision_mutex);
  if (!decided) return {"not decided", "no verbs domain was opened in this process yet"};
  return decision;
}

void forget_fork_protection_decision() {
  const std::lock_guard<std::mutex> lock(decision_mutex);
  decided = false;
}

ForkProtection preview_fork_protection(const IbverbsSymbols& verbs, ForkPolicy policy) {
  {
    const std::lock_guard<std::mutex> lock(decision_mutex);
    if (decided) return decision;
  }
  return decide(verbs, policy, /*apply=*/false);
}

}  // namespace hmr::verbs
