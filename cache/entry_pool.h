// Storage for cache entries: slabs of entries with a free list, so an entry costs its own
// size (not a malloc chunk's) and a miss rarely calls malloc.  Slabs double from 512 entries
// up to 2 MiB, then stay at 2 MiB: each big slab is one transparent huge page
// (util/page_array.h), so hits among a million entries do not miss the TLB too.
//
// Entries are recycled, never freed, while the pool lives, and only after a grace period of
// the cache's read sections (util/read_sections.h).  A reader of the index may hold a pointer
// to an entry that has meanwhile died, and may count on its `state` and threads' counts of it
// for as long as its read section lasts (cache/cache_entry.h); every thread that may still act on an
// entry it holds no reference to (a probe, a put, a settle) does so inside a read section.
// So a released entry waits on a pending list, and a batch of them moves to the free list
// after wait_for_readers(): once it is reused, nobody still looks at its last life, and
// allocate() may reset it whole.  Releasing frees nothing and never waits, so it is safe
// anywhere, including under the cache's writer mutex and inside a read section; allocating may
// call malloc or wait for readers, and must happen outside both.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "cache/cache_entry.h"
#include "util/page_array.h"
#include "util/read_sections.h"

namespace hmr::core {

class CacheEntryPool {
 public:
  // `readers` are the sections whose grace period a released entry waits for; used only by
  // allocate(), so they may be constructed after the pool.
  explicit CacheEntryPool(ReadSections& readers) : readers_(readers) {}
  // Forgets the counts owners still record for its entries (cache/owner_counts.h), so that
  // entries a later pool builds at the same addresses start from none.
  ~CacheEntryPool();
  CacheEntryPool(const CacheEntryPool&) = delete;
  CacheEntryPool& operator=(const CacheEntryPool&) = delete;

  // A reset entry, claimed, with one shared reference: its caller's.
  CacheEntry* allocate();
  // An entry whose finalization was claimed (CacheEntry::claim_finalization), or one from
  // allocate() that was never filed (no reader ever saw it: it could be reused at once, but
  // one path for both is simpler).
  void release(CacheEntry* entry);

 private:
  static constexpr size_t kFirstSlabEntries = 512;
  static constexpr size_t kLargestSlabEntries = (size_t{2} << 20) / sizeof(CacheEntry);
  // Released entries wait for this many before one grace period recycles them all (below it,
  // an empty free list grows a slab instead): a cache that evicts on every miss pays one
  // membarrier per kRecycleBatch misses, and keeps at most this many entries unusable.
  static constexpr size_t kRecycleBatch = 64;

  void grow();  // a new slab onto the free list; mutex_ held

  ReadSections& readers_;
  std::mutex mutex_;
  CacheEntry* free_ = nullptr;     // reusable now
  CacheEntry* pending_ = nullptr;  // released, waiting for a grace period
  size_t pending_count_ = 0;
  std::vector<PageArray<CacheEntry>> slabs_;
};

}  // namespace hmr::core
