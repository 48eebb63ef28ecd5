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
#include <string>
#include <thread>
#include <vector>

#include "core/cached_mr.h"
#include "hmem/dmabuf_share.h"
#include "monitor/device_monitor.h"
#include "util/handle_storage.h"

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

}  // namespace
