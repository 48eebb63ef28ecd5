#include "util/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <system_error>

#include "util/log.h"

namespace hmr::core {

// One run_batch() call's work, on its caller's stack.  Workers reach it through queue_ and
// tell the caller when they are done with it (helpers_inside), so it ends with the call: no
// worker refers to it afterwards, which also keeps a forked child from finding a batch that
// only a worker (not in the child) referred to.
struct ThreadPool::Batch {
  std::span<const Task> tasks;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;  // the batch's own: guards finished, helpers_inside and first_failure
  std::condition_variable done;
  size_t finished = 0;
  size_t helpers_inside = 0;  // workers that took it from the queue and have not let go
  Status first_failure;
};

ThreadPool::ThreadPool(size_t workers, size_t queue_capacity)
    : worker_count_(workers), queue_capacity_(std::max<size_t>(queue_capacity, 1)) {}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

namespace {

// The registration pool of this process, made on first use and never destroyed: workers may be
// blocked on it while static destructors run.
std::atomic<ThreadPool*> registration_pool_here{nullptr};
// The pools forked children inherited from their ancestors, through ThreadPool::inherited_:
// kept reachable (leak checkers), never used or destroyed again.
ThreadPool* inherited_pools = nullptr;

}  // namespace

void ThreadPool::forget_parents_pool() {
  // The child has only the thread that forked: the parent's workers are not here, and its
  // lock and condition variable may be held by them for ever.  Destroying that condition
  // variable waits for its waiters, so a child that returned from main hung in exit() (as
  // joining threads that are not here would); the child makes a pool of its own on first use.
  ThreadPool* parents = registration_pool_here.exchange(nullptr, std::memory_order_relaxed);
  if (parents == nullptr) return;
  parents->inherited_ = inherited_pools;
  inherited_pools = parents;
}

// At load, so that no fork() finds the registration half done (a child would wait for ever
// on a function-local static's guard copied "in progress").
const bool ThreadPool::forks_handled_ = [] {
  const int err = pthread_atfork(nullptr, nullptr, &ThreadPool::forget_parents_pool);
  if (err != 0) {
    log_message(LogLevel::warn, "pthread_atfork for the registration pool failed (%s): a forked "
                "child of a process that registered 64 MiB or more may hang in exit()",
                std::strerror(err));
  }
  return err == 0;
}();

ThreadPool& ThreadPool::registration_pool(size_t threads) {
  ThreadPool* pool = registration_pool_here.load(std::memory_order_acquire);
  if (pool != nullptr) return *pool;
  // The caller is one of the threads, so the pool holds one fewer.  Until a batch starts one,
  // a pool has no thread: a racer's spare is deleted at no cost.
  auto made = std::make_unique<ThreadPool>(threads > 1 ? threads - 1 : 0, 64);
  if (registration_pool_here.compare_exchange_strong(pool, made.get(),
                                                     std::memory_order_acq_rel)) {
    return *made.release();
  }
  return *pool;
}

size_t ThreadPool::started_workers() {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size();
}

void ThreadPool::work_through(Batch& batch) {
  for (;;) {
    const size_t index = batch.next.fetch_add(1, std::memory_order_relaxed);
    if (index >= batch.tasks.size()) return;
    Status status;
    if (!batch.failed.load(std::memory_order_relaxed)) {
      try {
        status = batch.tasks[index]();
      } catch (const std::bad_alloc&) {
        // (out_of_memory() allocates nothing: a throw from here would leave the batch's
        // helpers behind on a dead stack.)
        status = out_of_memory();
      } catch (...) {
        status = Status(HMR_EIO, "task threw");  // (as short: nothing allocated)
      }
      if (!status.ok()) batch.failed.store(true, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lock(batch.mutex);
    if (!status.ok() && batch.first_failure.ok()) batch.first_failure = std::move(status);
    if (++batch.finished == batch.tasks.size()) batch.done.notify_all();
  }
}

void ThreadPool::start_workers_locked() {
  try {
    while (threads_.size() < worker_count_) threads_.emplace_back([this] { worker_loop(); });
  } catch (const std::exception&) {
    // No more threads for now (std::system_error), or no memory for one (std::bad_alloc):
    // the callers do the work themselves.
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    Batch* batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      batch = queue_.front();
      queue_.pop_front();
      // Counted before mutex_ is let go: a caller that withdraws its requests under mutex_
      // then waits for us.  (Order: mutex_, then a batch's; never the other way.)
      const std::lock_guard<std::mutex> inside(batch->mutex);
      ++batch->helpers_inside;
    }
    work_through(*batch);
    // The last touch: once we let go of its mutex the caller may return and the batch end.
    const std::lock_guard<std::mutex> lock(batch->mutex);
    if (--batch->helpers_inside == 0 && batch->finished == batch->tasks.size()) {
      batch->done.notify_all();
    }
  }
}

Status ThreadPool::run_batch(std::span<const Task> tasks) {
  if (tasks.empty()) return ok_status();
  Batch batch;
  batch.tasks = tasks;
  const size_t helpers = std::min(worker_count_, tasks.size() - 1);
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    start_workers_locked();
    // A request that cannot be queued for want of memory is not made: the caller does the
    // work itself.  (The throw left the batch, on this stack, named in the queue for a worker
    // to reach after it was gone; what was pushed is withdrawn below as always.)
    try {
      for (size_t i = 0; i < helpers && queue_.size() < queue_capacity_; ++i) {
        queue_.push_back(&batch);
      }
    } catch (const std::bad_alloc&) {
    }
  }
  if (helpers > 0) wake_.notify_all();
  work_through(batch);
  if (helpers > 0) {
    // Every task has been taken: requests no worker took are withdrawn, and those that took
    // one are waited for below.
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase(queue_, &batch);
  }
  std::unique_lock<std::mutex> lock(batch.mutex);
  batch.done.wait(lock, [&] {
    return batch.finished == batch.tasks.size() && batch.helpers_inside == 0;
  });
  return std::move(batch.first_failure);
}

}  // namespace hmr::core
