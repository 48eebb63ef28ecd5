#include "registration/export_holders.h"

#include <pthread.h>

#include <algorithm>
#include <new>
#include <vector>

#include "util/fork_generation.h"
#include "util/fork_held_lock.h"

namespace hmr::core {

ExportHolders& ExportHolders::instance() {
  static ExportHolders* holders = new ExportHolders();  // outlives every static domain
  return *holders;
}

namespace {
[[maybe_unused]] const bool fork_handlers_registered =
    hold_lock_across_fork<&ExportHolders::fork_lock>();
}  // namespace

// A parent's thread may have been waiting in remove() at the fork: the child's copy of the
// condition variable would count a waiter that is not there, and glibc's notify may then wait
// for it for ever.  The child starts with a new one (nobody in the child waits on it yet).
void ExportHolders::renew_after_fork_in_child() {
  new (&instance().calls_ended_) std::condition_variable();
}
namespace {
[[maybe_unused]] const bool renewed_in_child =
    pthread_atfork(nullptr, nullptr, &ExportHolders::renew_after_fork_in_child) == 0;
}  // namespace

void ExportHolders::add(NicPressureRelief& holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  holders_.push_back(Holder{&holder, fork_generation(), 0});
}

void ExportHolders::remove(NicPressureRelief& holder) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto found = std::find_if(holders_.begin(), holders_.end(),
                                  [&](const Holder& h) { return h.relief == &holder; });
  if (found == holders_.end()) return;
  // Calls counted by the parent of a forked child were the parent's threads', which do not
  // exist here and will never uncount them; no call in this process asks such a holder.
  if (found->fork_generation == fork_generation()) {
    calls_ended_.wait(lock, [&] { return found->calls == 0; });
  }
  holders_.erase(found);
}

size_t ExportHolders::release_unused_elsewhere(size_t count, const NicPressureRelief* except,
                                               ExportRelief which) {
  // The holders to ask, each counted as in use so that none goes meanwhile.
  std::vector<std::list<Holder>::iterator> asked;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t generation = fork_generation();
    for (auto it = holders_.begin(); it != holders_.end(); ++it) {
      if (it->relief == except || it->fork_generation != generation) continue;
      ++it->calls;
      asked.push_back(it);
    }
  }
  struct Uncount {  // (also when a giving back throws: remove() would wait for ever)
    ExportHolders& holders;
    std::vector<std::list<Holder>::iterator>& asked;
    ~Uncount() {
      std::lock_guard<std::mutex> lock(holders.mutex_);
      for (auto it : asked) --it->calls;
      holders.calls_ended_.notify_all();
    }
  } uncount{*this, asked};
  size_t released = 0;
  for (auto it : asked) {
    if (released < count) released += it->relief->release_unused_exports(count - released, which);
  }
  return released;
}

}  // namespace hmr::core
