// CachedMr: the MR handle of a cache hit of host memory (core/hit_path.cpp).  It is all such
// an MR needs — its domain, the cache reference, the range — and nothing a flagged, keyed,
// bound or device MR needs (those are MemoryRegions).  Handles come from a process-wide pool
// with a free list per thread, so a hit and its close allocate nothing and take no lock.
// The C ABI accepts either kind wherever it takes an hmr_mr; the rare calls other than key,
// desc and close are answered by a MemoryRegion view of the handle, so every rule of an MR is
// written once (MemoryRegion).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "cache/cache_handle.h"
#include "util/object.h"

namespace hmr::core {

class Domain;
class MemoryRegion;
class RegistrationCache;

class CachedMr : public Tagged<ObjectClass::cached_memory_region> {
 public:
  // The key and descriptor are copied out of the entry here, while its line is in the cache
  // from taking the reference, so hmr_mr_key and hmr_mr_desc read only the handle.
  CachedMr(Domain& domain, RegistrationCache& cache, const CacheHandle& handle, uintptr_t start,
           uint64_t length, uint64_t access, void* context, bool raw_keys)
      : domain_(domain), cache_(cache), handle_(handle.through_registers()), start_(start),
        length_(length),
        access_(access), context_(context),
        desc_(handle.desc()),
        key_(raw_keys ? HMR_KEY_NOTAVAIL : handle.key_low_u64()) {}

  // A handle from the calling thread's free list (refilled in batches from the shared pool);
  // ends its life with release().
  static CachedMr* make(Domain& domain, RegistrationCache& cache, const CacheHandle& handle,
                        uintptr_t start, uint64_t length, uint64_t access, void* context,
                        bool raw_keys);
  // Makes sure the next make() on this thread takes no allocation: the one step of a hit that
  // may fail for want of memory (bad_alloc), done before anything is counted or taken.
  static void reserve();
  // Destroys the handle (a later use of it is refused as "not an MR handle", usually) and
  // gives its storage back to the calling thread's free list.
  static void release(CachedMr* mr);

  Domain& domain() const { return domain_; }
  RegistrationCache& cache() const { return cache_; }
  const CacheHandle& handle() const { return handle_; }
  uintptr_t start() const { return start_; }
  uint64_t length() const { return length_; }
  uint64_t access() const { return access_; }
  void* context() const { return context_; }

  void* desc() const { return desc_; }
  // HMR_KEY_NOTAVAIL in RAW domains: the key is read with hmr_mr_raw_attr, never as a u64.
  uint64_t key() const { return key_; }

  // The MemoryRegion this handle became when an operation needed one of its own (a rereg, an
  // indirect key over it: Domain::promote); null for a plain hit.  It owns the cache
  // reference from then on and writes the key and descriptor back here when they change, so
  // hmr_mr_key and hmr_mr_desc stay one load.
  MemoryRegion* promoted() const { return promoted_.load(std::memory_order_acquire); }
  bool promote_to(MemoryRegion* region) {
    MemoryRegion* expected = nullptr;
    return promoted_.compare_exchange_strong(expected, region, std::memory_order_acq_rel);
  }
  void publish(void* desc, uint64_t key) {
    desc_ = desc;
    key_ = key;
  }

 private:
  Domain& domain_;
  RegistrationCache& cache_;
  CacheHandle handle_;
  uintptr_t start_;
  uint64_t length_;
  uint64_t access_;
  void* context_;
  void* desc_;
  uint64_t key_;
  std::atomic<MemoryRegion*> promoted_{nullptr};
};

namespace cached_mr_detail {

// The storage of one handle.  While free it carries the free-list link after the handle's
// tag, never over it: a stale handle's tag stays dead (zeroed by release) while it waits.
union alignas(alignof(CachedMr)) Storage {
  unsigned char bytes[sizeof(CachedMr)];
  struct {
    uint64_t dead_tag;
    Storage* next;
  } free;
};
static_assert(sizeof(Storage) == sizeof(CachedMr));

inline constexpr size_t kBatch = 64;         // moved between a thread and the shared pool at once
inline constexpr size_t kThreadLimit = 256;  // a thread keeps at most this many free handles

// The calling thread's free handles.  Plain data in constant-initialised initial-exec TLS:
// the hit path reaches it without a call or an initialisation guard.
struct ThreadFreeList {
  Storage* head;
  size_t count;
};
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadFreeList free_list;

void refill(ThreadFreeList& list);  // from the shared pool; registers the thread-exit return
void spill(ThreadFreeList& list);   // a batch back to the shared pool
// Makes sure the thread's free handles go back to the shared pool when it exits (a thread
// that only closes handles others made has never refilled).
void return_at_exit();

}  // namespace cached_mr_detail

inline void CachedMr::reserve() {
  cached_mr_detail::ThreadFreeList& list = cached_mr_detail::free_list;
  if (__builtin_expect(list.head == nullptr, 0)) cached_mr_detail::refill(list);
}

inline CachedMr* CachedMr::make(Domain& domain, RegistrationCache& cache,
                                const CacheHandle& handle, uintptr_t start, uint64_t length,
                                uint64_t access, void* context, bool raw_keys) {
  reserve();
  cached_mr_detail::ThreadFreeList& list = cached_mr_detail::free_list;
  cached_mr_detail::Storage* storage = list.head;
  list.head = storage->free.next;
  --list.count;
  return new (storage->bytes)
      CachedMr(domain, cache, handle, start, length, access, context, raw_keys);
}

inline void CachedMr::release(CachedMr* mr) {
  mr->~CachedMr();
  cached_mr_detail::ThreadFreeList& list = cached_mr_detail::free_list;
  auto* storage = reinterpret_cast<cached_mr_detail::Storage*>(mr);
  // The tag dies here, in the storage: a store in the destructor may be dropped by the
  // compiler (the object's lifetime ends there), and a stale handle must read a dead tag.
  storage->free.dead_tag = 0;
  if (__builtin_expect(list.head == nullptr, 0)) cached_mr_detail::return_at_exit();
  storage->free.next = list.head;
  list.head = storage;
  if (__builtin_expect(++list.count > cached_mr_detail::kThreadLimit, 0)) {
    cached_mr_detail::spill(list);
  }
}

}  // namespace hmr::core
