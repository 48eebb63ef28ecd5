#include "util/handle_storage.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "util/fork_held_lock.h"

namespace hmr {
namespace {

constexpr size_t kStep = 64;
constexpr size_t kClasses = 256;  // up to 16 KiB; larger objects share one map of lists
// Size class i's list is guarded by stripe i % kStripes: few enough locks that fork() can
// hold them all at once (below; ThreadSanitizer's deadlock detector allows a thread 64).
constexpr size_t kStripes = 8;

// A free block: the dead tag first (never overwritten), then the link.
struct FreeBlock {
  uint64_t dead_tag;
  FreeBlock* next;
};
static_assert(sizeof(FreeBlock) <= kStep);

struct Storage {
  std::mutex stripes[kStripes];
  FreeBlock* heads[kClasses] = {};  // heads[i] under stripes[i % kStripes]
  std::mutex large_mutex;
  std::map<size_t, FreeBlock*> large;  // rounded size -> free list
};

// Never destroyed: handles may be closed by static destructors of other libraries.
Storage& storage() {
  static Storage* instance = new Storage();
  return *instance;
}

// Held across fork() (util/fork_held_lock.h): all of them, then the large blocks' lock.
struct ForkLocks {
  void lock_for_fork() {
    for (std::mutex& stripe : storage().stripes) stripe.lock();
    storage().large_mutex.lock();
  }
  void unlock_after_fork() {
    storage().large_mutex.unlock();
    for (std::mutex& stripe : storage().stripes) stripe.unlock();
  }
  void release_in_child() { unlock_after_fork(); }
};
ForkLocks& fork_locks() {
  static ForkLocks locks;
  (void)storage();
  return locks;
}
[[maybe_unused]] const bool fork_handlers_registered = hold_across_fork<&fork_locks>();

size_t rounded(size_t bytes) { return (bytes + kStep - 1) / kStep * kStep; }

FreeBlock*& head_for(Storage& all, size_t size, std::unique_lock<std::mutex>& lock) {
  const size_t index = size / kStep - 1;
  if (index < kClasses) {
    lock = std::unique_lock<std::mutex>(all.stripes[index % kStripes]);
    return all.heads[index];
  }
  lock = std::unique_lock<std::mutex>(all.large_mutex);
  return all.large[size];
}

}  // namespace

void* allocate_handle_storage(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  Storage& all = storage();
  {
    std::unique_lock<std::mutex> lock;
    FreeBlock*& head = head_for(all, size, lock);
    if (FreeBlock* block = head) {
      head = block->next;
      return block;
    }
  }
  return ::operator new(size, std::align_val_t{kStep});
}

void release_handle_storage(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  auto* free_block = static_cast<FreeBlock*>(block);
  std::memset(&free_block->dead_tag, 0, sizeof free_block->dead_tag);
  Storage& all = storage();
  std::unique_lock<std::mutex> lock;
  FreeBlock*& head = head_for(all, size, lock);
  free_block->next = head;
  head = free_block;
}

}  // namespace hmr
