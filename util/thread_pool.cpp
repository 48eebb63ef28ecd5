#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <system_error>

#include <pthread.h>

namespace hmr::core {

struct ThreadPool::Batch {
  std::span<const Task> tasks;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;  // the batch's own: guards finished and first_failure only
  std::condition_variable done;
  size_t finished = 0;
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

ThreadPool& ThreadPool::registration_pool(size_t threads) {
  [[maybe_unused]] static const bool forks_handled =
      pthread_atfork(nullptr, nullptr, &forget_parents_pool) == 0;
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
        status = make_error(HMR_ENOMEM, "out of memory in a pool task");
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
  } catch (const std::system_error&) {
    // No more threads for now: the callers do the work themselves.
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Batch> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    work_through(*batch);
  }
}

Status ThreadPool::run_batch(std::span<const Task> tasks) {
  if (tasks.empty()) return ok_status();
  auto batch = std::make_shared<Batch>();
  batch->tasks = tasks;
  const size_t helpers = std::min(worker_count_, tasks.size() - 1);
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    start_workers_locked();
    for (size_t i = 0; i < helpers && queue_.size() < queue_capacity_; ++i) queue_.push_back(batch);
  }
  if (helpers > 0) wake_.notify_all();
  work_through(*batch);
  std::unique_lock<std::mutex> lock(batch->mutex);
  batch->done.wait(lock, [&] { return batch->finished == batch->tasks.size(); });
  return std::move(batch->first_failure);
}

}  // namespace hmr::core
