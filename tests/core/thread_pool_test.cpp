// core::ThreadPool: every task runs, the pool stays at its size, failures come back, nested
// and concurrent batches finish, and destroying a pool leaves no thread behind.
#include "util/thread_pool.h"

#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace hmr::core {
namespace {

// Whether the kernel task `tid` of this process has begun to exit. A thread another one has
// joined can still be listed in /proc/self/task for a moment: pthread_join returns when the
// kernel clears the thread's tid (in do_exit's exit_mm), before the task is released. do_exit
// sets PF_EXITING (0x4, include/linux/sched.h) earlier than that, and /proc/<tid>/stat shows
// the task's flags as its ninth field (proc(5)).
bool exiting(const char* tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
  FILE* file = std::fopen(path, "r");
  if (file == nullptr) return true;  // released since readdir: gone
  char line[1024];
  const bool read = std::fgets(line, sizeof line, file) != nullptr;
  std::fclose(file);
  if (!read) return true;
  // The command name (field 2) may hold spaces and parentheses: fields 3 on follow the last ')'.
  const char* rest = std::strrchr(line, ')');
  char state = 0;
  unsigned long long flags = 0;
  if (rest == nullptr ||
      std::sscanf(rest + 1, " %c %*d %*d %*d %*d %*d %llu", &state, &flags) != 2) {
    return false;
  }
  return (flags & 0x4) != 0;
}

// The threads of this process that are not on their way out.
size_t thread_count() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  size_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.' && !exiting(entry->d_name)) ++count;
  }
  closedir(dir);
  return count;
}

std::vector<ThreadPool::Task> counting_tasks(size_t n, std::atomic<size_t>& counter) {
  std::vector<ThreadPool::Task> tasks;
  for (size_t i = 0; i < n; ++i) {
    tasks.emplace_back([&counter] {
      counter.fetch_add(1);
      return ok_status();
    });
  }
  return tasks;
}

TEST(ThreadPool, RunsEveryTaskOnce) {
  ThreadPool pool(3, 8);
  std::atomic<size_t> counter{0};
  const std::vector<ThreadPool::Task> tasks = counting_tasks(1000, counter);
  ASSERT_TRUE(pool.run_batch(tasks).ok());
  EXPECT_EQ(counter.load(), 1000u);
}

TEST(ThreadPool, EmptyBatchAndZeroWorkersRunOnTheCaller) {
  ThreadPool pool(0, 8);
  EXPECT_TRUE(pool.run_batch({}).ok());
  std::set<std::thread::id> seen;
  std::vector<ThreadPool::Task> tasks;
  for (int i = 0; i < 10; ++i) {
    tasks.emplace_back([&seen] {
      seen.insert(std::this_thread::get_id());  // one thread only: no race
      return ok_status();
    });
  }
  ASSERT_TRUE(pool.run_batch(tasks).ok());
  EXPECT_EQ(seen, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(pool.started_workers(), 0u);
}

TEST(ThreadPool, NeverMoreThreadsThanItsSize) {
  const size_t before = thread_count();
  ThreadPool pool(2, 4);
  EXPECT_EQ(pool.started_workers(), 0u);  // lazily: nothing until the first batch
  std::mutex mutex;
  std::set<std::thread::id> seen;
  for (int round = 0; round < 50; ++round) {
    std::vector<ThreadPool::Task> tasks;
    for (int i = 0; i < 64; ++i) {
      tasks.emplace_back([&] {
        std::lock_guard<std::mutex> lock(mutex);
        seen.insert(std::this_thread::get_id());
        return ok_status();
      });
    }
    ASSERT_TRUE(pool.run_batch(tasks).ok());
  }
  EXPECT_EQ(pool.started_workers(), 2u);
  EXPECT_LE(seen.size(), 3u);  // two workers and the caller
  EXPECT_EQ(thread_count(), before + 2);
}

TEST(ThreadPool, ReturnsTheFailureAndSkipsWhatHadNotStarted) {
  ThreadPool pool(0, 4);  // one thread: the order is the task order
  std::atomic<size_t> ran{0};
  std::vector<ThreadPool::Task> tasks;
  for (int i = 0; i < 10; ++i) {
    tasks.emplace_back([&ran, i]() -> Status {
      ran.fetch_add(1);
      if (i == 3) return make_error(HMR_EIO, "task %d failed", i);
      return ok_status();
    });
  }
  const Status status = pool.run_batch(tasks);
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_EQ(status.reason(), "task 3 failed");
  EXPECT_EQ(ran.load(), 4u);
}

TEST(ThreadPool, FailureOnAWorkerComesBack) {
  ThreadPool pool(3, 8);
  std::vector<ThreadPool::Task> tasks;
  for (int i = 0; i < 100; ++i) {
    tasks.emplace_back([i]() -> Status {
      if (i % 10 == 7) return make_error(HMR_ENOMEM, "no memory for %d", i);
      return ok_status();
    });
  }
  EXPECT_EQ(pool.run_batch(tasks).code(), HMR_ENOMEM);
  // The pool is still usable after a failed batch.
  std::atomic<size_t> counter{0};
  EXPECT_TRUE(pool.run_batch(counting_tasks(20, counter)).ok());
  EXPECT_EQ(counter.load(), 20u);
}

TEST(ThreadPool, NestedAndConcurrentBatchesFinish) {
  ThreadPool pool(2, 2);  // a queue smaller than the demand: callers do the rest
  std::atomic<size_t> counter{0};
  auto nested = [&] {
    std::vector<ThreadPool::Task> outer;
    for (int i = 0; i < 8; ++i) {
      outer.emplace_back([&]() -> Status {
        const std::vector<ThreadPool::Task> inner = counting_tasks(16, counter);
        return pool.run_batch(inner);
      });
    }
    EXPECT_TRUE(pool.run_batch(outer).ok());
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) callers.emplace_back(nested);
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(counter.load(), 4u * 8u * 16u);
}

// Counts, when a thread ends, that it ended: thread-local destructors run before the thread
// finishes, so once a pool has joined its workers every witness they armed has counted.
// (/proc/self/task is no witness: a joined thread's entry lingers until the kernel reaps it.)
struct ExitWitness {
  std::atomic<int>* exited = nullptr;
  ~ExitWitness() {
    if (exited != nullptr) exited->fetch_add(1);
  }
};
thread_local ExitWitness exit_witness;

TEST(ThreadPool, DestroyingThePoolJoinsItsThreads) {
  // The pool's own workers are followed: other tests' threads may come and go meanwhile.
  const pid_t caller = gettid();
  std::mutex mutex;
  std::condition_variable all_seen;
  std::set<pid_t> workers;
  std::atomic<int> exited{0};
  {
    ThreadPool pool(4, 8);
    std::vector<ThreadPool::Task> tasks;
    for (int i = 0; i < 16; ++i) {
      // Each task waits until every worker has picked one, so all four are seen (the deadline
      // only keeps a broken pool from hanging the test).
      tasks.emplace_back([&] {
        std::unique_lock<std::mutex> lock(mutex);
        if (gettid() != caller) {
          workers.insert(gettid());
          exit_witness.exited = &exited;
        }
        all_seen.notify_all();
        all_seen.wait_for(lock, std::chrono::seconds(10), [&] { return workers.size() >= 4; });
        return ok_status();
      });
    }
    ASSERT_TRUE(pool.run_batch(tasks).ok());
    EXPECT_EQ(pool.started_workers(), 4u);
    ASSERT_EQ(workers.size(), 4u);
    EXPECT_EQ(exited.load(), 0) << "workers stay while the pool lives";
  }
  EXPECT_EQ(exited.load(), 4) << "destroying the pool returned before its workers ended";
}

}  // namespace
}  // namespace hmr::core
