// ThreadPool: a fixed, small set of worker threads for work that splits into independent
// pieces (pre-faulting a huge range, registering its chunks).  The queue is bounded and a
// caller never blocks on it: the caller works through its own batch too, so a full queue, a
// nested batch or a pool of zero workers all still finish.  Tasks must not take hmr locks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "util/status.h"

namespace hmr::core {

class ThreadPool {
 public:
  using Task = std::function<Status()>;

  // `workers` threads start lazily, on the first batch that can use them; at most
  // `queue_capacity` helper requests wait at once (more are dropped: the caller does the work).
  ThreadPool(size_t workers, size_t queue_capacity);
  ~ThreadPool();  // joins every worker (never called for the registration pool)
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool for registrations; `threads` (HMR_REG_THREADS, the caller included)
  // fixes its size the first time it is asked for (in this process: a forked child makes its
  // own) and is ignored afterwards.  Never destroyed.
  static ThreadPool& registration_pool(size_t threads);

  // Runs every task and returns when all have finished.  After a task fails, tasks not yet
  // started are skipped; the first failure is returned.
  Status run_batch(std::span<const Task> tasks);

  size_t workers() const { return worker_count_; }
  size_t started_workers();

 private:
  struct Batch;
  static void work_through(Batch& batch);
  void start_workers_locked();
  void worker_loop();

  // fork() child handler of registration_pool(): the parent's pool is left alone.
  static void forget_parents_pool();
  static const bool forks_handled_;  // forget_parents_pool() registered (at load)

  const size_t worker_count_;
  const size_t queue_capacity_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Batch*> queue_;  // helper requests: a batch, once per worker it may use
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  ThreadPool* inherited_ = nullptr;  // an older pool a forked child inherited (thread_pool.cpp)
};

}  // namespace hmr::core
