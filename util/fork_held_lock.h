// fork() copies a process with only the thread that called it.  A lock another thread held at
// that moment stays held in the child for ever, and the child's first use of what it guards
// waits for ever (ForkSafePools.*: a child hung within 6 forks).  hmr's process-wide leaf
// locks (nothing else is taken while one is held, but malloc's, which glibc makes safe across
// fork itself) are therefore taken by fork() before it copies the process and let go after,
// in the parent and in the child, so what they guard is whole on both sides.
//
// Register when libhmr is loaded (a namespace-scope initialiser), before any of hmr's fork
// handlers that wait for a thread of hmr's own (the deferred reaper's): prepare steps run in
// the reverse order of registration, so that thread finishes, with these locks free, first.
#pragma once

#include <pthread.h>

#include <mutex>
#include <new>
#include <shared_mutex>
#include <type_traits>

namespace hmr {

// `owner` returns the object whose lock_for_fork() takes the lock, unlock_after_fork() lets
// go of it in the parent, and release_in_child() in the child.  The child's thread is not the
// one that took it, as the lock sees it (another thread id): a std::mutex may be unlocked
// there (glibc's default mutex does not check its owner), but a std::shared_mutex must be
// made anew (glibc's rwlock takes a writer's unlock by another id for a reader's, and stays
// locked: a child that forked again hung on it).  True when the handlers were registered
// (pthread_atfork fails only for want of memory; the lock is then unsafe across fork).
template <auto owner>
bool hold_across_fork() {
  (void)owner();  // made now, not first inside a fork handler
  return pthread_atfork([] { owner().lock_for_fork(); }, [] { owner().unlock_after_fork(); },
                        [] { owner().release_in_child(); }) == 0;
}

// The same for one lock, a std::mutex or a std::shared_mutex, that `lock` returns: released
// in the child as its type needs (above).
template <auto lock>
bool hold_lock_across_fork() {
  using Mutex = std::remove_reference_t<decltype(lock())>;
  static_assert(std::is_same_v<Mutex, std::mutex> || std::is_same_v<Mutex, std::shared_mutex>);
  (void)lock();  // made now, not first inside a fork handler
  return pthread_atfork([] { lock().lock(); }, [] { lock().unlock(); },
                        [] {
                          if constexpr (std::is_same_v<Mutex, std::shared_mutex>) {
                            new (&lock()) std::shared_mutex();
                          } else {
                            lock().unlock();
                          }
                        }) == 0;
}

}  // namespace hmr
