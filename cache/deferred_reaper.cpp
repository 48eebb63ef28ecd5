#include "cache/deferred_reaper.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "cache/registration_cache.h"
#include "util/log.h"
#include "util/wait_readable.h"

namespace hmr::core {

DeferredReaper& DeferredReaper::instance() {
  static DeferredReaper* reaper = [] {
    auto* created = new DeferredReaper();
    // Registered after the monitors' fork handlers (a cache joins its monitor before it is
    // added here), so fork() runs this prepare handler first.
    if (const int err = pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
        err != 0) {
      log_message(LogLevel::warn, "pthread_atfork for the deferred-deregistration thread failed "
                  "(%s): a child forked while it deregisters may inherit a cache's lock held",
                  std::strerror(err));
    }
    return created;
  }();
  return *reaper;
}

Status DeferredReaper::add(RegistrationCache* cache) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Room first, so that nothing below can fail after the thread started or the cache is
  // listed (a cache that attach() took for unlisted would be left on its monitor).
  try {
    if (caches_.size() == caches_.capacity()) caches_.reserve(2 * caches_.size() + 1);
    if (spare_.capacity() < caches_.size() + 1) {
      std::vector<RegistrationCache*> larger;
      larger.reserve(2 * (caches_.size() + 1));
      spare_.swap(larger);
    }
  } catch (const std::bad_alloc&) {
    return out_of_memory();
  }
  if (thread_pid_ != getpid()) {
    if (wakeup_.load(std::memory_order_relaxed) < 0) {
      const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (fd < 0) {
        return make_error(HMR_ENOMEM, "eventfd for the deferred-deregistration thread: %s",
                          std::strerror(errno));
      }
      wakeup_.store(fd, std::memory_order_release);
    }
    try {
      std::thread(&DeferredReaper::run, this).detach();
    } catch (const std::system_error& e) {
      return make_error(HMR_EAGAIN, "cannot start the deferred-deregistration thread: %s", e.what());
    } catch (const std::bad_alloc&) {  // (the thread's state)
      return out_of_memory();
    }
    thread_pid_ = getpid();
  }
  caches_.push_back(cache);
  return ok_status();
}

void DeferredReaper::remove(RegistrationCache* cache) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      caches_.erase(std::remove(caches_.begin(), caches_.end(), cache), caches_.end());
      if (serving_ != cache) return;
    }
    sched_yield();  // the reaper is finishing a batch of this cache's deregistrations
  }
}

void DeferredReaper::wake() {
  const int fd = wakeup_.load(std::memory_order_acquire);
  if (fd < 0) return;
  const uint64_t one = 1;
  // A full counter (2^64 - 2 wakes not yet read) cannot happen; EAGAIN would only mean that.
  (void)!write(fd, &one, sizeof one);
}

void DeferredReaper::run() {
  bool poll_refused = false;
  for (;;) {
    const int fd = wakeup_.load(std::memory_order_acquire);
    pollfd ready{fd, POLLIN, 0};
    // (Where poll refuses, a round every millisecond: freed memory is still unpinned,
    // util/wait_readable.h.)
    wait_readable(&ready, 1, "hmr's deferred-deregistration thread", poll_refused);
    uint64_t wakes = 0;
    (void)!read(fd, &wakes, sizeof wakes);
    // Every cache listed when the wake was read, one at a time, each marked as served while
    // the mutex is released.  From a copy: a cache removed meanwhile shifts the list, and
    // walking it by index would skip the one after.  One removed before its turn is skipped.
    // (The copy allocates nothing: see round_.)
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (round_.capacity() < caches_.size()) round_.swap(spare_);
      round_.assign(caches_.begin(), caches_.end());
    }
    for (RegistrationCache* cache : round_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (std::find(caches_.begin(), caches_.end(), cache) == caches_.end()) continue;
        serving_ = cache;
      }
      cache->reap_deferred();
      std::lock_guard<std::mutex> lock(mutex_);
      serving_ = nullptr;
    }
  }
}

void DeferredReaper::before_fork() {
  // Not in the middle of a cache's round: the child would inherit that cache's writer mutex
  // (or the NIC's own lock) held by a thread it does not have, and its domain's close would
  // wait for it forever.  Holding mutex_ keeps the thread from starting another cache; a
  // round ends by itself (hmr holds no lock across the NIC's call, so the thread never waits
  // for the forking one, unless a callback NIC's dereg takes a lock the forking thread holds:
  // docs/semantics.md, "Under pressure").
  DeferredReaper& self = instance();
  self.mutex_.lock();
  while (self.serving_ != nullptr) {
    self.mutex_.unlock();
    sched_yield();
    self.mutex_.lock();
  }
}

void DeferredReaper::after_fork_in_parent() { instance().mutex_.unlock(); }

void DeferredReaper::after_fork_in_child() {
  DeferredReaper& self = instance();
  // The thread stayed in the parent; so do the caches it served (an inherited cache stops
  // caching in the child and deregisters at its domain's close).
  self.caches_.clear();
  self.serving_ = nullptr;
  self.thread_pid_ = 0;
  const int inherited = self.wakeup_.exchange(-1, std::memory_order_relaxed);
  if (inherited >= 0) close(inherited);
  self.mutex_.unlock();
}

}  // namespace hmr::core
