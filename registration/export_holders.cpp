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
  // One holder counted at a time, from just before its call to just after: a callback NIC's
  // dereg run by a giving back may close another domain, whose remove() waits for its count
  // (counting every holder up front made that wait for this very thread, for ever).  The next
  // holder is found and counted while the current one still is, so neither leaves the list
  // under its iterator.
  const uint64_t generation = fork_generation();
  auto eligible = [&](std::list<Holder>::iterator it) {
    return it->relief != except && it->fork_generation == generation;
  };
  std::list<Holder>::iterator current;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current = holders_.begin();
    while (current != holders_.end() && !eligible(current)) ++current;
    if (current == holders_.end()) return 0;
    ++current->calls;
  }
  size_t released = 0;
  for (;;) {
    struct Uncount {  // (also when a giving back throws: remove() would wait for ever)
      ExportHolders& holders;
      std::list<Holder>::iterator& it;
      bool armed = true;
      ~Uncount() {
        if (!armed) return;
        std::lock_guard<std::mutex> lock(holders.mutex_);
        --it->calls;
        holders.calls_ended_.notify_all();
      }
    } uncount{*this, current};
    if (released < count) released += current->relief->release_unused_exports(count - released, which);
    std::lock_guard<std::mutex> lock(mutex_);
    auto next = std::next(current);
    while (next != holders_.end() && !eligible(next)) ++next;
    if (released < count && next != holders_.end()) ++next->calls;
    --current->calls;
    uncount.armed = false;
    calls_ended_.notify_all();
    if (released >= count || next == holders_.end()) return released;
    current = next;
  }
}

}  // namespace hmr::core
