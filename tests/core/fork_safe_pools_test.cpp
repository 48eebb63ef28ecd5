// hmr's process-wide pools behind handles (util/handle_storage.h, the cache hit's handles of
// core/cached_mr.h) across fork(): a parent's thread inside one of their locks at the fork
// does not exist in the child, which would wait for that lock for ever at its first handle of
// that size (a child opening its own domain after a data loader forked it).  Here a thread
// allocates and frees in a tight loop, so that it is inside a lock most of the time, while
// this thread forks; each child must take and give back storage of the same sizes at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/cached_mr.h"
#include "hmem/dmabuf_share.h"
#include "monitor/device_monitor.h"
#include "util/handle_storage.h"
#include "util/thread_pool.h"
#include "tests/sanitizer_build.h"

namespace {

constexpr int kForks = 60;
constexpr size_t kSmall = 200;     // a size class of its own lock
constexpr size_t kLarge = 20000;   // beyond the size classes: the map of large blocks

// Forks kForks children while `churn` runs on another thread; each child runs `in_child`
// under a 10 s alarm.  Returns "" when every child exited 0, else what the first one did.
template <typename Churn, typename InChild>
std::string fork_while(Churn churn, InChild in_child) {
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread churning([&] {
    started.store(true);
    while (!stop.load(std::memory_order_relaxed)) churn();
  });
  while (!started.load()) {
  }
  std::string failure;
  for (int f = 0; f < kForks && failure.empty(); ++f) {
    const pid_t child = fork();
    if (child < 0) {
      failure = "fork failed";
      break;
    }
    if (child == 0) {
      alarm(10);
      in_child();
      _exit(0);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      failure = "child " + std::to_string(f) +
                (WTERMSIG(status) == SIGALRM ? " hung (its alarm)"
                                             : " died of signal " + std::to_string(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0) {
      failure = "child " + std::to_string(f) + " exited " + std::to_string(WEXITSTATUS(status));
    }
  }
  stop = true;
  churning.join();
  return failure;
}

TEST(ForkSafePools, HandleStorageServesAChildForkedWhileAnotherThreadAllocates) {
  const std::string failure = fork_while(
      [] {
        for (size_t bytes : {kSmall, kLarge}) {
          void* block = hmr::allocate_handle_storage(bytes);
          hmr::release_handle_storage(block, bytes);
        }
      },
      [] {
        for (size_t bytes : {kSmall, kLarge}) {
          void* block = hmr::allocate_handle_storage(bytes);
          hmr::release_handle_storage(block, bytes);
        }
      });
  EXPECT_EQ(failure, "");
}

// The cache hit's handles come from per-thread lists refilled from, and spilled to, a shared
// pool in batches (refill takes an empty list's batch, spill gives one back): a thread that
// trades batches is in the shared pool's lock often.
TEST(ForkSafePools, HitHandlesServeAChildForkedWhileAnotherThreadTradesBatches) {
  using hmr::core::cached_mr_detail::free_list;
  using hmr::core::cached_mr_detail::refill;
  using hmr::core::cached_mr_detail::spill;
  auto trade = [] {
    if (free_list.head == nullptr) refill(free_list);
    spill(free_list);
  };
  const std::string failure = fork_while(trade, trade);
  EXPECT_EQ(failure, "");
}

// The locks are taken again in a child that forks in turn (a worker that starts workers).
// A lock the child only seemed to release (glibc's rwlock, unlocked by another thread id, as
// the child's thread is to the lock) hung that second fork in its prepare step.
TEST(ForkSafePools, AChildForksAgainAndItsChildUsesThemToo) {
  auto use_all = [] {
    void* block = hmr::allocate_handle_storage(kSmall);
    hmr::release_handle_storage(block, kSmall);
    (void)hmr::core::DeviceMonitor::instance().frees_reported(0, 1);
    (void)hmr::core::DmabufShares::instance().live_exports();
  };
  use_all();
  const std::string failure = fork_while(use_all, [&] {
    use_all();
    const pid_t grandchild = fork();
    if (grandchild < 0) _exit(2);
    if (grandchild == 0) {
      use_all();
      _exit(0);
    }
    int status = 0;
    while (waitpid(grandchild, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(3);
    use_all();
  });
  EXPECT_EQ(failure, "");
}

// The registration pool (util/thread_pool.h): its workers are not in a child, and its lock
// and condition variable may be held by them.  A child of a process whose pool has started
// its workers gets a pool of its own, which works, and it ends through exit() — static
// destructors and all.  Before, the child's exit() waited for ever in the destruction of the
// pool's condition variable, for waiters that are not there (any child of a process that had
// registered 64 MiB or more, pre-faulted by the pool).  (One fork, no other thread of the
// test's: LeakSanitizer checks the child at its exit, and what only a thread that is not in
// the child refers to would look leaked.)
TEST(ForkSafePools, AChildOfAProcessWithRegistrationWorkersHasItsOwnAndExits) {
  using hmr::core::ThreadPool;
  auto batch = [](ThreadPool& pool) {
    std::atomic<size_t> ran{0};
    std::vector<ThreadPool::Task> tasks(16, [&ran] {
      ran.fetch_add(1, std::memory_order_relaxed);
      return hmr::ok_status();
    });
    return pool.run_batch(tasks).ok() && ran.load() == tasks.size();
  };
  // (Its size was fixed by the first test of this process that asked for it.)
  ThreadPool& parents = ThreadPool::registration_pool(3);
  ASSERT_GE(parents.workers(), 1u) << "no worker to leave behind: nothing to test";
  ASSERT_TRUE(batch(parents));
  ASSERT_EQ(parents.started_workers(), parents.workers());
  std::fflush(nullptr);  // so that the child's exit() writes nothing the parent had buffered
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);
    ThreadPool& mine = ThreadPool::registration_pool(3);
    if (&mine == &parents) _exit(2);
    if (mine.started_workers() != 0 || mine.workers() != 2) _exit(3);
    // (ThreadSanitizer ends a forked child that starts a thread.)
    if (!hmr_test::kUnderThreadSanitizer && (!batch(mine) || mine.started_workers() != 2)) {
      _exit(4);
    }
    exit(0);  // hung here, under its alarm
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "the child died of signal " + std::to_string(WTERMSIG(status)) +
                                    (WTERMSIG(status) == SIGALRM ? " (hung: its alarm)" : "")
                              : "the child exited " + std::to_string(WEXITSTATUS(status)) +
                                    " (2: its pool is the parent's; 3, 4: its own does not work)");
  EXPECT_EQ(&ThreadPool::registration_pool(3), &parents) << "the parent keeps its pool";
  EXPECT_TRUE(batch(parents));
}

}  // namespace
