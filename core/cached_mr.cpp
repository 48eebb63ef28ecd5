#include "core/cached_mr.h"

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace hmr::core {
namespace {

// The storage of one handle.  While free it carries the free-list link after the handle's
// tag, never over it: a stale handle's tag stays dead (zeroed by ~Tagged) while it waits.
union alignas(alignof(CachedMr)) Storage {
  unsigned char bytes[sizeof(CachedMr)];
  struct {
    uint64_t dead_tag;
    Storage* next;
  } free;
};
static_assert(sizeof(Storage) == sizeof(CachedMr));

constexpr size_t kBatch = 64;         // moved between a thread and the shared pool at once
constexpr size_t kThreadLimit = 256;  // a thread keeps at most this many free handles

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

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Storage[]>> slabs_;
  std::vector<Storage*> batches_;
};

SharedPool& shared_pool() {
  static SharedPool* pool = new SharedPool;  // never destroyed: threads may exit after main
  return *pool;
}

// The calling thread's free handles.  Plain data in initial-exec TLS: the hit path reaches
// it without a call or an initialisation guard.
struct ThreadFreeList {
  Storage* head;
  size_t count;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadFreeList free_list;

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

// Gives a thread's free handles back to the shared pool when the thread exits.  Touched only
// when the thread first refills its list, which registers the destructor.
struct ThreadExitReturn {
  ~ThreadExitReturn() {
    while (free_list.head != nullptr) shared_pool().give_batch(split_batch(free_list));
  }
};
thread_local ThreadExitReturn thread_exit_return;

}  // namespace

CachedMr* CachedMr::make(Domain& domain, RegistrationCache& cache, const CacheHandle& handle,
                         uintptr_t start, uint64_t length, uint64_t access, void* context,
                         bool raw_keys) {
  ThreadFreeList& list = free_list;
  if (list.head == nullptr) {
    (void)&thread_exit_return;  // odr-use: constructs it, so its destructor runs at exit
    list.head = shared_pool().take_batch();
    list.count = kBatch;
  }
  Storage* storage = list.head;
  list.head = storage->free.next;
  --list.count;
  return new (storage->bytes)
      CachedMr(domain, cache, handle, start, length, access, context, raw_keys);
}

void CachedMr::release(CachedMr* mr) {
  mr->~CachedMr();
  if (free_list.head == nullptr) (void)&thread_exit_return;  // a thread that only closes
  auto* storage = reinterpret_cast<Storage*>(mr);
  storage->free.next = free_list.head;
  free_list.head = storage;
  if (++free_list.count > kThreadLimit) shared_pool().give_batch(split_batch(free_list));
}

}  // namespace hmr::core
