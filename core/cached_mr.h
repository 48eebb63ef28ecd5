// CachedMr: the MR handle of a cache hit of host memory (core/hit_path.cpp).  It is all such
// an MR needs — its domain, the cache reference, the range — and nothing a flagged, keyed,
// bound or device MR needs (those are MemoryRegions).  Handles come from a process-wide pool
// with a free list per thread, so a hit and its close allocate nothing and take no lock.
// The C ABI accepts either kind wherever it takes an hmr_mr; the rare calls other than key,
// desc and close are answered by a MemoryRegion view of the handle, so every rule of an MR is
// written once (MemoryRegion).
#pragma once

#include <cstdint>

#include "cache/cache_handle.h"
#include "util/object.h"

namespace hmr::core {

class Domain;
class RegistrationCache;

class CachedMr : public Tagged<ObjectClass::cached_memory_region> {
 public:
  CachedMr(Domain& domain, RegistrationCache& cache, const CacheHandle& handle, uintptr_t start,
           uint64_t length, uint64_t access, void* context, bool raw_keys)
      : domain_(domain), cache_(cache), handle_(handle), start_(start), length_(length),
        access_(access), context_(context), raw_keys_(raw_keys) {}

  // A handle from the calling thread's free list (refilled in batches from the shared pool);
  // ends its life with release().
  static CachedMr* make(Domain& domain, RegistrationCache& cache, const CacheHandle& handle,
                        uintptr_t start, uint64_t length, uint64_t access, void* context,
                        bool raw_keys);
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

  void* desc() const { return handle_.registration().desc; }
  uint64_t key() const {
    return raw_keys_ ? HMR_KEY_NOTAVAIL : handle_.registration().key.low_u64();
  }

 private:
  Domain& domain_;
  RegistrationCache& cache_;
  CacheHandle handle_;
  uintptr_t start_;
  uint64_t length_;
  uint64_t access_;
  void* context_;
  bool raw_keys_;  // RAW domains: the key is read with hmr_mr_raw_attr, never as a u64
};

}  // namespace hmr::core
