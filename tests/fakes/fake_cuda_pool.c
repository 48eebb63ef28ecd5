/* The fake CUDA driver's stream-ordered allocator: cuMemAllocAsync, cuMemAllocFromPoolAsync,
 * cuMemFreeAsync, the default pool of each device and its attributes, cuMemPoolTrimTo, and the
 * synchronisations that give a pool's unused memory back.  It follows cuda.h (CUDA 13):
 *  - "The allocation comes from the memory pool current to the stream's device"; by default
 *    that is the device's default pool (cuDeviceGetMemPool).  cuDeviceSetMemPool and
 *    cuMemPoolCreate are not modelled: every pool here is a default pool.
 *  - A null stream needs a current context ("CUDA_ERROR_INVALID_CONTEXT (default stream
 *    specified with no current context)").  The fake has no stream objects: only the null
 *    stream, CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2) are streams here, and it
 *    runs stream work at once, so an asynchronous free has happened when the call returns.
 *  - BUFFER_ID: "Every memory allocation from any of the CUDA memory allocation APIs will have
 *    a unique ID over a process lifetime.  Subsequent allocations do not reuse IDs from
 *    previous freed allocations" (CU_POINTER_ATTRIBUTE_BUFFER_ID), so an allocation handed out
 *    again from the pool's memory gets a new one.  MEMORY_BLOCK_ID is "the physical
 *    allocation the pointer belongs to": here the chunk, a new id each time it is backed.
 *  - CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: "When more than the release threshold bytes of memory
 *    are held by the memory pool, the allocator will try to release memory back to the OS on
 *    the next call to stream, event or context synchronize. (default 0)".  So by default a
 *    free followed by a synchronisation gives the memory back, and the next allocation at
 *    that address has new physical memory (its bytes read zero here).
 *  - cuMemPoolTrimTo: releases "until the pool contains fewer than minBytesToKeep reserved
 *    bytes"; "the pool will be guaranteed to have at least minBytesToKeep bytes reserved
 *    after the operation"; it "cannot release OS allocations that back outstanding
 *    asynchronous allocations", and releases at its own granularity.
 *  - RESERVED_MEM_HIGH and USED_MEM_HIGH may only be set to zero; the *_CURRENT ones are read
 *    only.
 *  - Destroying a primary context frees the pool memory allocated in it and releases the unused
 *    chunks of that device's pool, whatever its threshold (assumed: cuda.h does not say; memory
 *    allocated into another device's pool through cuMemAllocFromPoolAsync is freed, but that
 *    pool is not trimmed).
 * Layout.  Driver 580 on an H100 reported a 100 MiB cuMemAllocAsync allocation at a 32 MiB
 * boundary and, as its MAPPING, the pool's 32 MiB chunk holding the address (docs/gpu.md), so
 * a pool here is one 32 MiB-aligned address reservation whose 32 MiB chunks are backed
 * (mapped) as allocations need them and released whole.  Allocations are placed first fit at
 * 512-byte alignment (assumed: CUDA guarantees "at least 256 bytes"; 512 is the
 * textureAlignment of current GPUs), so small allocations share pages, as a real pool's may.
 * Pool memory exports as a dma-buf where every exported byte is in a backed chunk (assumed:
 * cuda.h names cuMemAlloc and fully mapped cuMemAddressReserve ranges; a pool is the latter
 * underneath).  cuIpcGetMemHandle refuses pool memory (fake_cuda_ipc.c). */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "fake_cuda_internal.h"
#include "fake_support.h"

#define POOL_CHUNK (32ull << 20)
#define POOL_CHUNKS 8 /* 256 MiB of address space per pool */
#define POOL_ALIGNMENT 512u

enum { /* CUmemPool_attribute */
  ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
  ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
  ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
  ATTR_RELEASE_THRESHOLD = 4,
  ATTR_RESERVED_MEM_CURRENT = 5,
  ATTR_RESERVED_MEM_HIGH = 6,
  ATTR_USED_MEM_CURRENT = 7,
  ATTR_USED_MEM_HIGH = 8,
};

struct pool {
  CUdeviceptr base; /* POOL_CHUNKS chunks of address space, PROT_NONE to the CPU; 0 until used */
  char *alias;      /* the bytes of the whole range; a released chunk's are dropped */
  unsigned long long chunk_block_id[POOL_CHUNKS]; /* 0: not backed */
  uint64_t release_threshold;
  uint64_t reserved_high, used_high;
  int reuse[3]; /* the three REUSE_* switches, stored and answered (all default enabled) */
};

static struct pool pools[FAKE_CUDA_DEVICE_COUNT];

static int pool_device(const void *handle) {
  for (int device = 0; device < FAKE_CUDA_DEVICE_COUNT; ++device) {
    if (handle == &pools[device]) return device;
  }
  return -1;
}

void *fake_pool_handle(int device) { return &pools[device]; }

static int chunk_of(const struct pool *pool, CUdeviceptr ptr) {
  return (int)((ptr - pool->base) / POOL_CHUNK);
}

static int in_pool(const struct pool *pool, CUdeviceptr ptr) {
  return pool->base != 0 && ptr >= pool->base && ptr < pool->base + POOL_CHUNKS * POOL_CHUNK;
}

unsigned long long fake_pool_block_id(int device, CUdeviceptr ptr) {
  const struct pool *pool = &pools[device];
  return in_pool(pool, ptr) ? pool->chunk_block_id[chunk_of(pool, ptr)] : 0;
}

/* Whether a live allocation of `device`'s pool overlaps [ptr, +size). */
static int touches_live_allocation(int device, CUdeviceptr ptr, size_t size) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *a = &allocations[i];
    if (a->live && a->pooled && a->device == device && a->base < ptr + size &&
        ptr < a->base + a->size) {
      return 1;
    }
  }
  return 0;
}

/* Backed chunks of one pool, and touching a live allocation of it: cuda.h wants "a valid CUDA
 * device allocation", not a freed one whose chunk the pool still holds. */
int fake_pool_exportable(CUdeviceptr ptr, size_t size) {
  for (int device = 0; device < FAKE_CUDA_DEVICE_COUNT; ++device) {
    const struct pool *pool = &pools[device];
    if (!in_pool(pool, ptr) || !in_pool(pool, ptr + size - 1)) continue;
    if (!touches_live_allocation(device, ptr, size)) return 0;
    for (int chunk = chunk_of(pool, ptr); chunk <= chunk_of(pool, ptr + size - 1); ++chunk) {
      if (pool->chunk_block_id[chunk] == 0) return 0;
    }
    return 1;
  }
  return 0;
}

static uint64_t reserved_bytes(const struct pool *pool) {
  uint64_t bytes = 0;
  for (int chunk = 0; chunk < POOL_CHUNKS; ++chunk) {
    if (pool->chunk_block_id[chunk] != 0) bytes += POOL_CHUNK;
  }
  return bytes;
}

static uint64_t used_bytes(int device) {
  uint64_t bytes = 0;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *a = &allocations[i];
    if (a->live && a->pooled && a->device == device) {
      bytes += fake_round_up(a->size, POOL_ALIGNMENT);
    }
  }
  return bytes;
}

static int chunk_in_use(int device, int chunk) {
  return touches_live_allocation(device, pools[device].base + (CUdeviceptr)chunk * POOL_CHUNK,
                                 POOL_CHUNK);
}

/* Gives unused chunks back, the highest first, while the pool keeps at least `keep` bytes
 * after each release.  Lock held. */
static void trim_to(int device, uint64_t keep) {
  struct pool *pool = &pools[device];
  for (int chunk = POOL_CHUNKS - 1; chunk >= 0; --chunk) {
    if (pool->chunk_block_id[chunk] == 0 || chunk_in_use(device, chunk)) continue;
    const uint64_t reserved = reserved_bytes(pool);
    if (reserved <= keep || reserved - POOL_CHUNK < keep) return; /* (no keep + CHUNK: wraps) */
    /* New physical memory the next time: the old bytes are gone. */
    madvise(pool->alias + (size_t)chunk * POOL_CHUNK, POOL_CHUNK, MADV_DONTNEED);
    pool->chunk_block_id[chunk] = 0;
  }
}

/* What a synchronisation does to every pool: releases down to its threshold.  Lock held. */
static void release_above_thresholds(void) {
  for (int device = 0; device < FAKE_CUDA_DEVICE_COUNT; ++device) {
    if (reserved_bytes(&pools[device]) > pools[device].release_threshold) {
      trim_to(device, pools[device].release_threshold);
    }
  }
}

static CUresult reserve_pool(struct pool *pool) {
  if (pool->base != 0) return SUCCESS;
  /* One chunk more than needed, so the range can start on a chunk boundary. */
  const size_t span = (POOL_CHUNKS + 1) * POOL_CHUNK;
  void *range = fake_reserve_device_range(span);
  if (range == NULL) return OUT_OF_MEMORY;
  char *alias = mmap(NULL, POOL_CHUNKS * POOL_CHUNK, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (alias == MAP_FAILED) {
    munmap(range, span);
    return OUT_OF_MEMORY;
  }
  pool->base = fake_round_up((uintptr_t)range, POOL_CHUNK);
  pool->alias = alias;
  return SUCCESS;
}

/* Lock held.  context: the device whose primary context made it, -1 from the test control. */
CUresult fake_pool_allocate(int device, size_t size, int context, CUdeviceptr *out) {
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) return INVALID_DEVICE;
  if (out == NULL || size == 0 || size > POOL_CHUNKS * POOL_CHUNK) return INVALID_VALUE;
  struct pool *pool = &pools[device];
  const CUresult reserved = reserve_pool(pool);
  if (reserved != SUCCESS) return reserved;
  const uint64_t span = fake_round_up(size, POOL_ALIGNMENT);
  CUdeviceptr candidate = pool->base;
  int moved = 1;
  while (moved) { /* first fit: a freed address is handed out again first */
    moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *a = &allocations[i];
      if (a->live && a->pooled && a->device == device && candidate < a->base + a->size &&
          a->base < candidate + span) {
        candidate = fake_round_up(a->base + a->size, POOL_ALIGNMENT);
        moved = 1;
      }
    }
  }
  if (candidate + span > pool->base + POOL_CHUNKS * POOL_CHUNK) return OUT_OF_MEMORY;
  int index = -1;
  const CUresult result =
      fake_record_allocation(device, candidate, size, FAKE_CUDA_MEM_DEVICE, context,
                             pool->alias + (candidate - pool->base), -1, &index);
  if (result != SUCCESS) return result;
  allocations[index].pooled = 1;
  for (int chunk = chunk_of(pool, candidate); chunk <= chunk_of(pool, candidate + span - 1);
       ++chunk) {
    if (pool->chunk_block_id[chunk] == 0) pool->chunk_block_id[chunk] = fake_next_id();
  }
  const uint64_t reserved_now = reserved_bytes(pool);
  const uint64_t used_now = used_bytes(device);
  if (reserved_now > pool->reserved_high) pool->reserved_high = reserved_now;
  if (used_now > pool->used_high) pool->used_high = used_now;
  *out = candidate;
  return SUCCESS;
}

void fake_pool_release_unused(int device) { trim_to(device, 0); }

void fake_reset_pools(void) {
  for (int device = 0; device < FAKE_CUDA_DEVICE_COUNT; ++device) {
    struct pool *pool = &pools[device];
    if (pool->alias != NULL) madvise(pool->alias, POOL_CHUNKS * POOL_CHUNK, MADV_DONTNEED);
    /* The address range stays reserved for the next test, as the device ranges do. */
    *pool = (struct pool){.base = pool->base, .alias = pool->alias, .reuse = {1, 1, 1}};
  }
}

/* The REUSE switches start enabled (cuda.h: "default enabled"), before any reset too. */
__attribute__((constructor)) static void fake_cuda_pools_load(void) { fake_reset_pools(); }

static int is_stream(const void *stream) {
  return stream == NULL || stream == (const void *)1 || stream == (const void *)2;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice device) {
  ENTER("cuDeviceGetDefaultMemPool");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (pool == NULL) LEAVE(INVALID_VALUE);
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  *pool = &pools[device];
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGetMemPool(void **pool, CUdevice device) {
  ENTER("cuDeviceGetMemPool");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  /* cuda.h lists only INVALID_VALUE among its errors, for a bad device too. */
  if (pool == NULL || device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_VALUE);
  *pool = &pools[device];
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t size, void *stream) {
  ENTER("cuMemAllocAsync");
  if (!is_stream(stream)) LEAVE(INVALID_VALUE);
  REQUIRE_CONTEXT();
  const int device = fake_current_device();
  LEAVE(fake_pool_allocate(device, size, device, ptr));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t size, void *pool,
                                        void *stream) {
  ENTER("cuMemAllocFromPoolAsync");
  if (!is_stream(stream) || pool_device(pool) < 0) LEAVE(INVALID_VALUE);
  REQUIRE_CONTEXT();
  LEAVE(fake_pool_allocate(pool_device(pool), size, fake_current_device(), ptr));
}

/* Only pool memory (assumed: cuda.h does not say what becomes of other memory passed here). */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, void *stream) {
  ENTER("cuMemFreeAsync");
  if (!is_stream(stream)) LEAVE(INVALID_VALUE);
  REQUIRE_CONTEXT();
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && a->pooled && a->base == ptr) {
      fake_release_allocation(a); /* the memory stays the pool's until a release */
      LEAVE(SUCCESS);
    }
  }
  LEAVE(INVALID_VALUE);
}

EXPORT CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
  ENTER("cuMemPoolTrimTo");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  const int device = pool_device(pool);
  if (device < 0) LEAVE(INVALID_VALUE);
  trim_to(device, keep);
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemPoolSetAttribute(void *handle, int attribute, void *value) {
  ENTER("cuMemPoolSetAttribute");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  const int device = pool_device(handle);
  if (device < 0 || value == NULL) LEAVE(INVALID_VALUE);
  struct pool *pool = &pools[device];
  switch (attribute) {
    case ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      pool->reuse[attribute - 1] = *(const int *)value != 0;
      break;
    case ATTR_RELEASE_THRESHOLD: pool->release_threshold = *(const uint64_t *)value; break;
    case ATTR_RESERVED_MEM_HIGH:
    case ATTR_USED_MEM_HIGH:
      if (*(const uint64_t *)value != 0) LEAVE(INVALID_VALUE); /* "illegal" but to zero */
      if (attribute == ATTR_RESERVED_MEM_HIGH) pool->reserved_high = 0;
      if (attribute == ATTR_USED_MEM_HIGH) pool->used_high = 0;
      break;
    default: LEAVE(INVALID_VALUE); /* the *_CURRENT ones are read only */
  }
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemPoolGetAttribute(void *handle, int attribute, void *value) {
  ENTER("cuMemPoolGetAttribute");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  const int device = pool_device(handle);
  if (device < 0 || value == NULL) LEAVE(INVALID_VALUE);
  const struct pool *pool = &pools[device];
  switch (attribute) {
    case ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *(int *)value = pool->reuse[attribute - 1];
      break;
    case ATTR_RELEASE_THRESHOLD: *(uint64_t *)value = pool->release_threshold; break;
    case ATTR_RESERVED_MEM_CURRENT: *(uint64_t *)value = reserved_bytes(pool); break;
    case ATTR_RESERVED_MEM_HIGH: *(uint64_t *)value = pool->reserved_high; break;
    case ATTR_USED_MEM_CURRENT: *(uint64_t *)value = used_bytes(device); break;
    case ATTR_USED_MEM_HIGH: *(uint64_t *)value = pool->used_high; break;
    default: LEAVE(INVALID_VALUE);
  }
  LEAVE(SUCCESS);
}

/* The fake's streams have no work outstanding; what a synchronisation still does is the pools'
 * release above their thresholds. */
EXPORT CUresult cuStreamSynchronize(void *stream) {
  ENTER("cuStreamSynchronize");
  if (!is_stream(stream)) LEAVE(INVALID_HANDLE); /* cuda.h lists no INVALID_VALUE here */
  REQUIRE_CONTEXT();
  release_above_thresholds();
  LEAVE(SUCCESS);
}

EXPORT CUresult cuCtxSynchronize(void) {
  ENTER("cuCtxSynchronize");
  REQUIRE_CONTEXT();
  release_above_thresholds();
  LEAVE(SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT int fake_cuda_alloc_pooled(int device, size_t size, unsigned long long *out) {
  pthread_mutex_lock(&fake_lock);
  LEAVE(fake_pool_allocate(device, size, -1, out));
}

/* Trims every pool to nothing but what live allocations hold, as a synchronisation does with
 * release thresholds of 0: the next allocation at a freed pool address has new memory. */
EXPORT void fake_cuda_release_pools(void) {
  pthread_mutex_lock(&fake_lock);
  for (int device = 0; device < FAKE_CUDA_DEVICE_COUNT; ++device) trim_to(device, 0);
  pthread_mutex_unlock(&fake_lock);
}
