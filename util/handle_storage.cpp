#include "util/handle_storage.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace hmr {
namespace {

constexpr size_t kStep = 64;
constexpr size_t kClasses = 256;  // up to 16 KiB; larger objects share one map of lists

// A free block: the dead tag first (never overwritten), then the link.
struct FreeBlock {
  uint64_t dead_tag;
  FreeBlock* next;
};
static_assert(sizeof(FreeBlock) <= kStep);

struct SizeClass {
  std::mutex mutex;
  FreeBlock* head = nullptr;
};

struct Storage {
  SizeClass classes[kClasses];
  std::mutex large_mutex;
  std::map<size_t, FreeBlock*> large;  // rounded size -> free list
};

// Never destroyed: handles may be closed by static destructors of other libraries.
Storage& storage() {
  static Storage* instance = new Storage();
  return *instance;
}

size_t rounded(size_t bytes) { return (bytes + kStep - 1) / kStep * kStep; }

FreeBlock*& head_for(Storage& all, size_t size, std::unique_lock<std::mutex>& lock) {
  const size_t index = size / kStep - 1;
  if (index < kClasses) {
    lock = std::unique_lock<std::mutex>(all.classes[index].mutex);
    return all.classes[index].head;
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
