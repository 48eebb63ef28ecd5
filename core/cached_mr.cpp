#include "core/cached_mr.h"

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "util/fork_held_lock.h"

namespace hmr::core::cached_mr_detail {
namespace {

// The shared pool: slabs that live as long as the process (handles are small and their
// number is bounded by the most ever open at once), and the free handles threads gave back.
class SharedPool {
 public:
  // A batch of kBatch free handles, linked.
  Storage* take_batch() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (batches_.empty()) {
      slabs_.push_back(std::make_unique<Storage[]>(kBatch));
      Storage* slab = slabs_.back().get();
      for (size_t i = 0; i < kBatch; ++i) {
        slab[i].free.dead_tag = 0;
        slab[i].free.next = i + 1 < kBatch ? &slab[i + 1] : nullptr;
      }
      return slab;
    }
    Storage* batch = batches_.back();
    batches_.pop_back();
    return batch;
  }
  void give_batch(Storage* batch) {
    std::lock_guard<std::mutex> lock(mutex_);
    batches_.push_back(batch);
  }
  // Its lock, held across fork() (util/fork_held_lock.h).
  std::mutex& fork_lock() { return mutex_; }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Storage[]>> slabs_;
  std::vector<Storage*> batches_;
};

SharedPool& shared_pool() {
  static SharedPool* pool = new SharedPool;  // never destroyed: threads may exit after main
  return *pool;
}

std::mutex& shared_pool_lock() { return shared_pool().fork_lock(); }

[[maybe_unused]] const bool fork_handlers_registered = hold_lock_across_fork<&shared_pool_lock>();

// Unlinks up to kBatch handles from the head of `list`.
Storage* split_batch(ThreadFreeList& list) {
  Storage* batch = list.head;
  Storage* last = list.head;
  size_t n = 1;
  while (n < kBatch && last->free.next != nullptr) {
    last = last->free.next;
    ++n;
  }
  list.head = last->free.next;
  last->free.next = nullptr;
  list.count -= n;
  return batch;
}

// Gives a thread's free handles back to the shared pool when the thread exits.  Constructed
// the first time the thread's list gets a handle (refill, or a close into an empty list).
struct ThreadExitReturn {
  ~ThreadExitReturn() {
    while (free_list.head != nullptr) shared_pool().give_batch(split_batch(free_list));
  }
};
thread_local ThreadExitReturn thread_exit_return;

}  // namespace

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadFreeList free_list = {
    nullptr, 0};

void refill(ThreadFreeList& list) {
  (void)&thread_exit_return;  // odr-use: constructs it, so its destructor runs at exit
  list.head = shared_pool().take_batch();
  list.count = kBatch;
}

void spill(ThreadFreeList& list) { shared_pool().give_batch(split_batch(list)); }

void return_at_exit() { (void)&thread_exit_return; }

}  // namespace hmr::core::cached_mr_detail
