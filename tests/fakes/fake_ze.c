/* A fake Level Zero loader: a real shared object named libze_loader.so.1 with the entry points
 * hmr's ZE iface dlsyms, so the real iface code runs without an Intel GPU.
 *
 * Two drivers: driver 0 with two devices, driver 1 with one.  Device memory lives in a PROT_NONE
 * address range reserved per device, so addresses are real and distinct per device and a CPU
 * touch faults; each device allocation is a memfd mapped PROT_NONE at its device address and
 * read-write at a private address only the fake uses, so copies really move bytes and an
 * exported dma-buf (a dup of that memfd) really holds them.  Every allocation gets a new id, so
 * a freed and reused address is a different allocation.  Allocations belong to a driver: every
 * context of the driver answers for them, as the Intel driver does.
 *
 * Command lists created in synchronous mode copy during the append; in any other mode the copy
 * waits for zeCommandListHostSynchronize, so a caller that forgets to wait reads stale bytes.
 *
 * As the Intel driver (intel/compute-runtime, "NEO") behaves, and hmr must cope with:
 *  - the dma-buf fd a zeMemGetAllocProperties export returns belongs to the driver: NEO hands out
 *    the allocation's internal handle, made once and kept (GraphicsAllocation::peekInternalHandle,
 *    and since the IPC-handle map, ContextImp::handleAllocationExtensions through
 *    getIpcMemHandle), so every export of one allocation returns the same fd number and the
 *    driver closes it when the allocation is freed.  Here: one cached fd per exported buffer.
 *  - on a driver with one device, small device allocations made without an export descriptor
 *    come from a USM pool (ContextImp::allocDeviceMem takes the pool only when
 *    lookupTable.exportMemory is false).  zeMemGetAddressRange answers the sub-allocation
 *    (ContextImp::getMemAddressRange: getPooledAllocationBasePtr / getPooledAllocationSize),
 *    zeMemGetAllocProperties answers the pool's allocation data (type and id of the pool, for
 *    any address inside it), and the export is the pool's whole buffer.  Here: driver 1.
 *  - in COMPOSITE hierarchy zeDeviceGet lists root devices, and memory placed on one tile
 *    reports that tile's sub-device handle (zeDeviceGetSubDevices lists it; zeDeviceGet does
 *    not).  Here: device 0.0 has two tiles.
 *  - after fork() the child gets the parent's answers.  The loader runs zeInit's work once per
 *    process under a std::call_once that the child inherits as done (level-zero
 *    source/lib/ze_libapi.cpp), so the child's zeInit returns the parent's result; the driver
 *    answers zeMemGetAllocProperties and zeMemGetAddressRange from its allocation table in
 *    process memory (compute-runtime level_zero/core/source/context/context.cpp:
 *    svmAllocsManager->getSVMAlloc) and has no fork handling (no pthread_atfork, no pid check),
 *    so the parent's device allocations, as they were at fork(), stay DEVICE with their ids
 *    and devices.  Here: the same, for the same reason (the fake's tables are process memory,
 *    and nothing here looks at the pid).
 *
 * Built twice: with API 1.6 features, and with FAKE_ZE_API_1_0 as an old loader that has no
 * zeDevicePciGetPropertiesExt and no zeCommandListHostSynchronize. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_ze_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

typedef int ze_result_t;

enum {
  SUCCESS = 0,
  OUT_OF_HOST_MEMORY = 0x70000002,
  OUT_OF_DEVICE_MEMORY = 0x70000003,
  UNINITIALIZED = 0x78000001,
  UNSUPPORTED_FEATURE = 0x78000003,
  INVALID_ARGUMENT = 0x78000004,
  INVALID_NULL_HANDLE = 0x78000005,
  INVALID_NULL_POINTER = 0x78000007,
  UNSUPPORTED_SIZE = 0x78000009,
  UNSUPPORTED_ALIGNMENT = 0x7800000a,
  INVALID_ENUMERATION = 0x7800000c,
};

enum { TYPE_UNKNOWN = 0, TYPE_HOST = 1, TYPE_DEVICE = 2, TYPE_SHARED = 3 };
enum { OPAQUE_FD = 1, DMA_BUF = 2 };
enum { MODE_SYNCHRONOUS = 1 };

struct chain {
  int stype;
  const struct chain *next;
};

typedef struct {
  int stype;
  void *pNext;
  int type;
  uint32_t vendorId, deviceId, flags, subdeviceId, coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts, maxCommandQueuePriority, numThreadsPerEU, physicalEUSimdWidth,
      numEUsPerSubslice, numSubslicesPerSlice, numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits, kernelTimestampValidBits;
  uint8_t uuid[16];
  char name[256];
} device_properties_t;

typedef struct {
  int stype;
  void *pNext;
  uint32_t domain, bus, device, function;
  int32_t genVersion, width;
  int64_t maxBandwidth;
} pci_properties_t;

typedef struct {
  int stype;
  void *pNext;
  uint32_t import_types, export_types, image_import_types, image_export_types;
} external_memory_properties_t;

typedef struct {
  int stype;
  void *pNext;
  int type;
  uint64_t id;
  uint64_t pageSize;
} allocation_properties_t;

typedef struct {
  int stype;
  const void *pNext;
  uint32_t flags;
  int fd;
} export_fd_t;

typedef struct {
  int stype;
  const void *pNext;
  uint32_t flags;
} flags_desc_t; /* context, host allocation and export descriptors */

typedef struct {
  int stype;
  const void *pNext;
  uint32_t flags, ordinal;
} device_alloc_desc_t;

typedef struct {
  int stype;
  const void *pNext;
  uint32_t ordinal, index, flags;
  int mode, priority;
} queue_desc_t;

struct fake_driver {
  int index;
};
struct fake_device {
  int driver;
  int index; /* within the driver */
  int global;
};
struct fake_context {
  int live;
  int driver;
};

#define MAX_PENDING 8
struct pending_copy {
  void *dst;
  const void *src;
  size_t size;
};
struct fake_list {
  int live;
  int mode;
  struct fake_context *context;
  struct pending_copy pending[MAX_PENDING];
  int pending_count;
};

struct allocation {
  int live;
  int is_pool;  /* a USM pool: never handed out itself, holds sub-allocations */
  int pool;     /* a sub-allocation: index of its pool in allocations[], else -1 */
  int tile;     /* placed on this tile (sub-device) of its device, else -1 */
  int export_fd; /* the driver's cached dma-buf fd of this buffer, -1 until first exported */
  int type;
  int driver;
  int device; /* global device index; -1 for host memory */
  uintptr_t base;
  size_t size;
  size_t mapped;
  uint64_t id;
  int memfd;   /* device memory only, else -1 */
  void *alias; /* device memory only: the fake's read-write view */
  int export_flags;
};

#define REGION_SIZE (256ull << 20) /* address space reserved per device */
#define GRANULE (64ull << 10)
#define MAX_CONTEXTS 16
#define MAX_LISTS 64
#define MAX_ALLOCATIONS 128
#define POOL_SIZE ((size_t)FAKE_ZE_POOL_SIZE)
#define POOL_MAX_ALLOC ((size_t)FAKE_ZE_POOL_MAX_ALLOC)
#define POOL_GRANULE 4096ull
#define TILES 2                     /* sub-devices of device 0.0 */
#define POOL_DRIVER 1               /* the driver with one device pools small allocations */

static const struct fake_driver drivers[FAKE_ZE_DRIVER_COUNT] = {{0}, {1}};
static const struct fake_device devices[FAKE_ZE_DEVICE_COUNT] = {{0, 0, 0}, {0, 1, 1}, {1, 0, 2}};
/* Tiles of device 0.0: handles zeDeviceGetSubDevices gives and zeDeviceGet never lists. */
static const struct fake_device tiles[TILES] = {{0, 0, 0}, {0, 0, 0}};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static unsigned last_init_flags;
static int driver_count = FAKE_ZE_DRIVER_COUNT;
static int fd_per_export; /* fake_ze_set_fd_per_export */
static void *regions[FAKE_ZE_DEVICE_COUNT];
static struct fake_context contexts[MAX_CONTEXTS];
static struct fake_list lists[MAX_LISTS];
static struct allocation allocations[MAX_ALLOCATIONS];
static uint64_t next_id = 1;
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;

#define ENTER(name)                                      \
  pthread_mutex_lock(&lock);                             \
  ze_result_t injected = fake_calls_enter(&calls, name); \
  if (injected != SUCCESS) {                             \
    pthread_mutex_unlock(&lock);                         \
    return injected;                                     \
  }                                                      \
  if (!initialized) LEAVE(UNINITIALIZED)

/* The result is computed before the lock is released: LEAVE(allocate(...)) runs allocate
 * under the lock. */
#define LEAVE(result)                                 \
  do {                                                \
    const __typeof__(result) leave_result = (result); \
    pthread_mutex_unlock(&lock);                      \
    return leave_result;                              \
  } while (0)

static size_t round_up(size_t value, size_t granule) {
  return (value + granule - 1) / granule * granule;
}

static int driver_of(const void *handle) {
  for (int i = 0; i < driver_count; ++i) {
    if (handle == (const void *)&drivers[i]) return i;
  }
  return -1;
}

static int device_of(const void *handle) {
  for (int i = 0; i < FAKE_ZE_DEVICE_COUNT; ++i) {
    if (handle == (const void *)&devices[i] && devices[i].driver < driver_count) return i;
  }
  return -1;
}

static int tile_of(const void *handle) {
  for (int i = 0; i < TILES; ++i) {
    if (handle == (const void *)&tiles[i]) return i;
  }
  return -1;
}

static struct fake_context *context_of(const void *handle) {
  for (int i = 0; i < MAX_CONTEXTS; ++i) {
    if (handle == (const void *)&contexts[i] && contexts[i].live) return &contexts[i];
  }
  return NULL;
}

static struct fake_list *list_of(const void *handle) {
  for (int i = 0; i < MAX_LISTS; ++i) {
    if (handle == (const void *)&lists[i] && lists[i].live) return &lists[i];
  }
  return NULL;
}

static int can_export_dmabuf(int device) { return device != 1; /* device 0.1 cannot */ }

/* The live allocation of `driver` holding ptr (any driver when driver < 0). Lock held. */
/* A pool is returned only for its free space: a sub-allocation holding ptr comes first. */
static struct allocation *find_allocation(int driver, uintptr_t ptr) {
  struct allocation *pool = NULL;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && (driver < 0 || a->driver == driver) && ptr >= a->base && ptr - a->base < a->size) {
      if (!a->is_pool) return a;
      pool = a;
    }
  }
  return pool;
}

/* The buffer the driver exports for a: the pool for a sub-allocation, else a itself. */
static struct allocation *buffer_of(struct allocation *a) {
  return a->pool >= 0 ? &allocations[a->pool] : a;
}

static int in_device_region(uintptr_t ptr) {
  for (int i = 0; i < FAKE_ZE_DEVICE_COUNT; ++i) {
    const uintptr_t start = (uintptr_t)regions[i];
    if (regions[i] != NULL && ptr >= start && ptr - start < REGION_SIZE) return 1;
  }
  return 0;
}

/* Where the fake reads or writes [ptr, ptr + size): device memory through its alias, anything
 * else in place.  NULL when the range runs out of its allocation or into unallocated device
 * memory. Lock held. */
static void *resolve(uintptr_t ptr, size_t size) {
  const struct allocation *a = find_allocation(-1, ptr);
  if (a == NULL) return in_device_region(ptr) ? NULL : (void *)ptr;
  if (a->is_pool) return NULL;
  if (size > a->size - (ptr - a->base)) return NULL;
  if (a->alias == NULL) return (void *)ptr;
  return (char *)a->alias + (ptr - a->base);
}

static struct allocation *free_slot(void) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (!allocations[i].live) return &allocations[i];
  }
  return NULL;
}

/* A buffer of its own: device memory at the device's reserved range, else host pages. */
static ze_result_t allocate_buffer(int driver, int device, int type, size_t size, size_t alignment,
                                   int export_flags, int tile, struct allocation **made) {
  if (size == 0 || size > REGION_SIZE) return UNSUPPORTED_SIZE;
  if (alignment != 0 && ((alignment & (alignment - 1)) != 0 || alignment > GRANULE)) {
    return UNSUPPORTED_ALIGNMENT;
  }
  struct allocation *slot = free_slot();
  if (slot == NULL) return OUT_OF_HOST_MEMORY;
  const size_t mapped = round_up(size, GRANULE);
  uintptr_t base = 0;
  int memfd = -1;
  void *alias = NULL;
  if (type == TYPE_DEVICE) {
    if (regions[device] == NULL) {
      void *region = fake_reserve_device_range(REGION_SIZE);
      if (region == NULL) return OUT_OF_DEVICE_MEMORY;
      regions[device] = region;
    }
    /* First fit from the start of the region, so a freed address is handed out again first. */
    base = round_up((uintptr_t)regions[device], GRANULE);
    for (int moved = 1; moved;) {
      moved = 0;
      for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
        const struct allocation *other = &allocations[i];
        if (other->live && other->type == TYPE_DEVICE && other->device == device &&
            base < other->base + other->mapped && other->base < base + mapped) {
          base = other->base + other->mapped;
          moved = 1;
        }
      }
    }
    if (base + mapped > (uintptr_t)regions[device] + REGION_SIZE) return OUT_OF_DEVICE_MEMORY;
    memfd = memfd_create("fake-ze-device-memory", MFD_CLOEXEC);
    if (memfd < 0) return OUT_OF_DEVICE_MEMORY;
    if (ftruncate(memfd, (off_t)mapped) != 0 ||
        mmap((void *)base, mapped, PROT_NONE, MAP_SHARED | MAP_FIXED, memfd, 0) == MAP_FAILED ||
        (alias = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)) == MAP_FAILED) {
      mmap((void *)base, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
           -1, 0);
      close(memfd);
      return OUT_OF_DEVICE_MEMORY;
    }
  } else {
    void *memory = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return OUT_OF_HOST_MEMORY;
    base = (uintptr_t)memory;
  }
  *slot = (struct allocation){.live = 1, .pool = -1, .tile = tile, .export_fd = -1,
                              .type = type, .driver = driver,
                              .device = type == TYPE_HOST ? -1 : device, .base = base,
                              .size = size, .mapped = mapped, .id = next_id++, .memfd = memfd,
                              .alias = alias, .export_flags = export_flags};
  *made = slot;
  return SUCCESS;
}

/* Where a sub-allocation of `size` fits in pool p (first fit), or 0. */
static uintptr_t pool_fit(const struct allocation *p, size_t size) {
  const int index = (int)(p - allocations);
  for (uintptr_t at = p->base; at + size <= p->base + p->size;) {
    int moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *sub = &allocations[i];
      if (sub->live && sub->pool == index && at < sub->base + sub->mapped &&
          sub->base < at + size) {
        at = sub->base + sub->mapped;
        moved = 1;
      }
    }
    if (!moved) return at;
  }
  return 0;
}

/* NEO's USM pool: one id for the pool and every sub-allocation in it. */
static ze_result_t allocate_pooled(int driver, int device, size_t size, void **out) {
  const size_t rounded = round_up(size, POOL_GRANULE);
  struct allocation *pool = NULL;
  uintptr_t at = 0;
  for (int i = 0; i < MAX_ALLOCATIONS && at == 0; ++i) {
    if (allocations[i].live && allocations[i].is_pool && allocations[i].device == device) {
      pool = &allocations[i];
      at = pool_fit(pool, rounded);
    }
  }
  if (at == 0) {
    const ze_result_t made = allocate_buffer(driver, device, TYPE_DEVICE, POOL_SIZE, 0, -1, -1,
                                             &pool);
    if (made != SUCCESS) return made;
    pool->is_pool = 1;
    at = pool->base;
  }
  struct allocation *slot = free_slot();
  if (slot == NULL) return OUT_OF_HOST_MEMORY;
  *slot = (struct allocation){.live = 1, .pool = (int)(pool - allocations), .tile = -1,
                              .export_fd = -1, .type = TYPE_DEVICE, .driver = driver,
                              .device = device, .base = at, .size = size, .mapped = rounded,
                              .id = pool->id, .memfd = -1,
                              .alias = (char *)pool->alias + (at - pool->base),
                              .export_flags = -1};
  *out = (void *)at;
  return SUCCESS;
}

static ze_result_t allocate(int driver, int device, int type, size_t size, size_t alignment,
                            int export_flags, int tile, void **out) {
  if (out == NULL) return INVALID_NULL_POINTER;
  if (type == TYPE_DEVICE && driver == POOL_DRIVER && export_flags <= 0 && size > 0 &&
      size <= POOL_MAX_ALLOC && (alignment == 0 || alignment <= POOL_GRANULE)) {
    return allocate_pooled(driver, device, size, out);
  }
  struct allocation *made = NULL;
  const ze_result_t result =
      allocate_buffer(driver, device, type, size, alignment, export_flags, tile, &made);
  if (result == SUCCESS) *out = (void *)made->base;
  return result;
}

static void release(struct allocation *a) {
  if (a->pool >= 0) {
    memset(a, 0, sizeof *a); /* the pool keeps the memory (and its exported fd) */
    return;
  }
  if (a->export_fd >= 0) close(a->export_fd); /* the driver closes what it exported */
  if (a->type == TYPE_DEVICE) {
    /* Keep the address reserved (and CPU-inaccessible) for the next allocation. */
    mmap((void *)a->base, a->mapped, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    munmap(a->alias, a->mapped);
    close(a->memfd);
  } else {
    munmap((void *)a->base, a->mapped);
  }
  memset(a, 0, sizeof *a);
}

#ifndef FAKE_ZE_API_1_0
static void run_pending(struct fake_list *list) {
  for (int i = 0; i < list->pending_count; ++i) {
    memmove(list->pending[i].dst, list->pending[i].src, list->pending[i].size);
  }
  list->pending_count = 0;
}
#endif

/* ---- the loader ---------------------------------------------------------------------------- */

EXPORT ze_result_t zeInit(uint32_t flags) {
  pthread_mutex_lock(&lock);
  const ze_result_t injected = fake_calls_enter(&calls, "zeInit");
  if (injected != SUCCESS) LEAVE(injected);
  if ((flags & ~3u) != 0) LEAVE(INVALID_ENUMERATION);
  last_init_flags = flags;
  initialized = 1;
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeDriverGet(uint32_t *count, const void **handles) {
  ENTER("zeDriverGet");
  if (count == NULL) LEAVE(INVALID_NULL_POINTER);
  if (handles != NULL) {
    for (uint32_t i = 0; i < *count && i < (uint32_t)driver_count; ++i) handles[i] = &drivers[i];
    if (*count > (uint32_t)driver_count) *count = (uint32_t)driver_count;
  } else {
    *count = (uint32_t)driver_count;
  }
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeDriverGetApiVersion(const void *driver, uint32_t *version) {
  ENTER("zeDriverGetApiVersion");
  if (driver_of(driver) < 0) LEAVE(INVALID_NULL_HANDLE);
  if (version == NULL) LEAVE(INVALID_NULL_POINTER);
#ifdef FAKE_ZE_API_1_0
  *version = 1u << 16 | 0u;
#else
  *version = 1u << 16 | 6u;
#endif
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeDeviceGet(const void *driver, uint32_t *count, const void **handles) {
  ENTER("zeDeviceGet");
  const int d = driver_of(driver);
  if (d < 0) LEAVE(INVALID_NULL_HANDLE);
  if (count == NULL) LEAVE(INVALID_NULL_POINTER);
  uint32_t available = 0;
  for (int i = 0; i < FAKE_ZE_DEVICE_COUNT; ++i) {
    if (devices[i].driver != d) continue;
    if (handles != NULL && available < *count) handles[available] = &devices[i];
    available++;
  }
  if (handles == NULL || *count > available) *count = available;
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeDeviceGetProperties(const void *device, device_properties_t *properties) {
  ENTER("zeDeviceGetProperties");
  const int tile = tile_of(device);
  const int g = tile >= 0 ? 0 : device_of(device);
  if (g < 0) LEAVE(INVALID_NULL_HANDLE);
  if (properties == NULL) LEAVE(INVALID_NULL_POINTER);
  if (properties->stype != 0x3) LEAVE(INVALID_ARGUMENT);
  void *next = properties->pNext;
  memset(properties, 0, sizeof *properties);
  properties->stype = 0x3;
  properties->pNext = next;
  properties->type = 1; /* GPU */
  properties->vendorId = 0x8086;
  properties->deviceId = 0x0bd5;
  properties->maxMemAllocSize = REGION_SIZE;
  properties->uuid[0] = (uint8_t)(0xd0 | devices[g].driver);
  properties->uuid[1] = (uint8_t)(0xe0 | devices[g].index);
  for (int k = 2; k < 16; ++k) properties->uuid[k] = (uint8_t)k;
  snprintf(properties->name, sizeof properties->name, "Fake Level Zero GPU %d.%d", devices[g].driver,
           devices[g].index);
  if (tile >= 0) {
    /* A tile: its own UUID, the SUBDEVICE flag (1 << 1) and its index. */
    properties->flags = 1u << 1;
    properties->subdeviceId = (uint32_t)tile;
    properties->uuid[15] = (uint8_t)(0x80 | tile);
  }
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeDeviceGetSubDevices(const void *device, uint32_t *count,
                                         const void **handles) {
  ENTER("zeDeviceGetSubDevices");
  const int g = device_of(device);
  if (g < 0 && tile_of(device) < 0) LEAVE(INVALID_NULL_HANDLE);
  if (count == NULL) LEAVE(INVALID_NULL_POINTER);
  const uint32_t available = g == 0 ? TILES : 0; /* tiles have no sub-devices of their own */
  if (handles != NULL) {
    for (uint32_t i = 0; i < *count && i < available; ++i) handles[i] = &tiles[i];
  }
  if (handles == NULL || *count > available) *count = available;
  LEAVE(SUCCESS);
}

#ifndef FAKE_ZE_API_1_0
EXPORT ze_result_t zeDevicePciGetPropertiesExt(const void *device, pci_properties_t *properties) {
  ENTER("zeDevicePciGetPropertiesExt");
  const int g = device_of(device);
  if (g < 0) LEAVE(INVALID_NULL_HANDLE);
  if (properties == NULL) LEAVE(INVALID_NULL_POINTER);
  if (properties->stype != 0x10008) LEAVE(INVALID_ARGUMENT);
  properties->domain = 0;
  properties->bus = 0x3a + 0x10 * (uint32_t)g;
  properties->device = 0;
  properties->function = 0;
  properties->genVersion = 4;
  properties->width = 16;
  properties->maxBandwidth = 32000000000ll;
  LEAVE(SUCCESS);
}
#endif

EXPORT ze_result_t zeDeviceGetExternalMemoryProperties(const void *device,
                                                       external_memory_properties_t *properties) {
  ENTER("zeDeviceGetExternalMemoryProperties");
  const int g = device_of(device);
  if (g < 0) LEAVE(INVALID_NULL_HANDLE);
  if (properties == NULL) LEAVE(INVALID_NULL_POINTER);
  if (properties->stype != 0xc) LEAVE(INVALID_ARGUMENT);
  const uint32_t types = can_export_dmabuf(g) ? (OPAQUE_FD | DMA_BUF) : OPAQUE_FD;
  properties->import_types = types;
  properties->export_types = types;
  properties->image_import_types = 0;
  properties->image_export_types = 0;
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeContextCreate(const void *driver, const flags_desc_t *desc, void **context) {
  ENTER("zeContextCreate");
  const int d = driver_of(driver);
  if (d < 0) LEAVE(INVALID_NULL_HANDLE);
  if (desc == NULL || context == NULL) LEAVE(INVALID_NULL_POINTER);
  if (desc->stype != 0xd) LEAVE(INVALID_ARGUMENT);
  for (int i = 0; i < MAX_CONTEXTS; ++i) {
    if (!contexts[i].live) {
      contexts[i] = (struct fake_context){1, d};
      *context = &contexts[i];
      LEAVE(SUCCESS);
    }
  }
  LEAVE(OUT_OF_HOST_MEMORY);
}

EXPORT ze_result_t zeContextDestroy(void *context) {
  ENTER("zeContextDestroy");
  struct fake_context *c = context_of(context);
  if (c == NULL) LEAVE(INVALID_NULL_HANDLE);
  for (int i = 0; i < MAX_LISTS; ++i) {
    if (lists[i].live && lists[i].context == c) LEAVE(0x78000006); /* HANDLE_OBJECT_IN_USE */
  }
  c->live = 0;
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeMemGetAllocProperties(const void *context, const void *ptr,
                                           allocation_properties_t *properties,
                                           const void **device) {
  ENTER("zeMemGetAllocProperties");
  const struct fake_context *c = context_of(context);
  if (c == NULL) LEAVE(INVALID_NULL_HANDLE);
  if (ptr == NULL || properties == NULL) LEAVE(INVALID_NULL_POINTER);
  if (properties->stype != 0x17) LEAVE(INVALID_ARGUMENT);
  struct allocation *a = find_allocation(c->driver, (uintptr_t)ptr);
  /* NEO answers from the allocation data holding ptr: for pooled memory, the pool's. */
  struct allocation *buffer = a != NULL ? buffer_of(a) : NULL;
  /* compute-runtime (ContextImp::getMemAllocProperties): memory it does not know is answered
   * UNKNOWN with SUCCESS, before the extension, the id or the device are looked at: an export
   * request leaves the fd, and the id and device are left, as the caller set them.  Only the
   * first struct of the chain is looked at (handleAllocationExtensions). */
  if (buffer == NULL) {
    properties->type = TYPE_UNKNOWN;
    LEAVE(SUCCESS);
  }
  const struct chain *first = properties->pNext;
  export_fd_t *export_fd =
      first != NULL && first->stype == 0x1a ? (export_fd_t *)(uintptr_t)first : NULL;
  if (export_fd != NULL) {
    const int export_failure = fake_calls_failure(&calls, "zeMemGetAllocProperties:export");
    if (export_failure != 0) LEAVE(export_failure);
    /* Drivers differ here (ContextImp::handleAllocationExtensions): older compute-runtime
     * refuses an OPAQUE_FD request with UNSUPPORTED_ENUMERATION and memory other than device
     * memory with UNSUPPORTED_FEATURE; newer ones never read the flags, refuse only shared
     * memory, and export host memory too.  hmr asks only for DMA_BUF of device memory on a
     * device that says it exports, where they all agree; the fake refuses the rest, as the
     * stricter of them, so hmr cannot come to rely on a newer driver's laxness. */
    if (export_fd->flags != DMA_BUF || a->type != TYPE_DEVICE || !can_export_dmabuf(a->device)) {
      LEAVE(UNSUPPORTED_FEATURE);
    }
    /* The dma-buf is the whole buffer (for pooled memory, the pool), made on the first export
     * and the same fd on every later one: the driver's, closed when the buffer is freed.
     * compute-runtime before 22.49 (DrmAllocation::peekInternalHandle called obtainFdFromHandle,
     * a DRM_IOCTL_PRIME_HANDLE_TO_FD, on every call; commit 623c9afdfa cached it) made a new fd
     * on every export, which was the caller's to close: fake_ze_set_fd_per_export. */
    if (fd_per_export) {
      export_fd->fd = fcntl(buffer->memfd, F_DUPFD_CLOEXEC, 0);
      if (export_fd->fd < 0) LEAVE(OUT_OF_HOST_MEMORY);
    } else {
      if (buffer->export_fd < 0) {
        buffer->export_fd = fcntl(buffer->memfd, F_DUPFD_CLOEXEC, 0);
        if (buffer->export_fd < 0) LEAVE(OUT_OF_HOST_MEMORY);
      }
      export_fd->fd = buffer->export_fd;
    }
  }
  properties->type = buffer->type;
  properties->id = buffer->id;
  properties->pageSize = 4096;
  if (device != NULL) {
    *device = NULL;
    if (a->tile >= 0) {
      *device = &tiles[a->tile];
    } else if (a->device >= 0) {
      *device = &devices[a->device];
    }
  }
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeMemGetAddressRange(const void *context, const void *ptr, void **base,
                                        size_t *size) {
  ENTER("zeMemGetAddressRange");
  const struct fake_context *c = context_of(context);
  if (c == NULL) LEAVE(INVALID_NULL_HANDLE);
  const struct allocation *a = find_allocation(c->driver, (uintptr_t)ptr);
  /* An address in no allocation (freed, or never allocated), and the free space of a pool:
   * compute-runtime's Context::getMemAddressRange answers ZE_RESULT_ERROR_ADDRESS_NOT_FOUND
   * for both (its unit test "getMemAddressRange(notAllocatedPoolPtr) == ADDRESS_NOT_FOUND");
   * releases before the Level Zero 1.13 result code said ZE_RESULT_ERROR_UNKNOWN.  Never
   * INVALID_ARGUMENT, which the fake answered for the first case until an audit against the
   * driver's source. */
  if (a == NULL || a->is_pool) LEAVE(0x78000021);
  if (base != NULL) *base = (void *)a->base;
  if (size != NULL) *size = a->size;
  LEAVE(SUCCESS);
}

/* The export types declared in a descriptor chain, or -1. */
static int declared_export(const void *chain_start) {
  for (const struct chain *ext = chain_start; ext != NULL; ext = ext->next) {
    if (ext->stype == 0x18) return (int)((const flags_desc_t *)(const void *)ext)->flags;
  }
  return -1;
}

EXPORT ze_result_t zeMemAllocDevice(const void *context, const device_alloc_desc_t *desc,
                                    size_t size, size_t alignment, const void *device, void **ptr) {
  ENTER("zeMemAllocDevice");
  const struct fake_context *c = context_of(context);
  const int g = device_of(device);
  if (c == NULL || g < 0 || devices[g].driver != c->driver) LEAVE(INVALID_NULL_HANDLE);
  if (desc == NULL) LEAVE(INVALID_NULL_POINTER);
  if (desc->stype != 0x15) LEAVE(INVALID_ARGUMENT);
  const int exported = declared_export(desc->pNext);
  if (exported > 0 && (exported & DMA_BUF) != 0 && !can_export_dmabuf(g)) LEAVE(UNSUPPORTED_FEATURE);
  LEAVE(allocate(c->driver, g, TYPE_DEVICE, size, alignment, exported, -1, ptr));
}

EXPORT ze_result_t zeMemAllocHost(const void *context, const flags_desc_t *desc, size_t size,
                                  size_t alignment, void **ptr) {
  ENTER("zeMemAllocHost");
  const struct fake_context *c = context_of(context);
  if (c == NULL) LEAVE(INVALID_NULL_HANDLE);
  if (desc == NULL) LEAVE(INVALID_NULL_POINTER);
  if (desc->stype != 0x16) LEAVE(INVALID_ARGUMENT);
  LEAVE(allocate(c->driver, -1, TYPE_HOST, size, alignment, -1, -1, ptr));
}

EXPORT ze_result_t zeMemAllocShared(const void *context, const device_alloc_desc_t *device_desc,
                                    const flags_desc_t *host_desc, size_t size, size_t alignment,
                                    const void *device, void **ptr) {
  ENTER("zeMemAllocShared");
  const struct fake_context *c = context_of(context);
  const int g = device == NULL ? -1 : device_of(device);
  if (c == NULL || (device != NULL && (g < 0 || devices[g].driver != c->driver))) {
    LEAVE(INVALID_NULL_HANDLE);
  }
  if (device_desc == NULL || host_desc == NULL) LEAVE(INVALID_NULL_POINTER);
  if (device_desc->stype != 0x15 || host_desc->stype != 0x16) LEAVE(INVALID_ARGUMENT);
  LEAVE(allocate(c->driver, g, TYPE_SHARED, size, alignment, -1, -1, ptr));
}

EXPORT ze_result_t zeMemFree(const void *context, void *ptr) {
  ENTER("zeMemFree");
  const struct fake_context *c = context_of(context);
  if (c == NULL) LEAVE(INVALID_NULL_HANDLE);
  struct allocation *a = find_allocation(c->driver, (uintptr_t)ptr);
  if (a == NULL || a->is_pool || a->base != (uintptr_t)ptr) LEAVE(INVALID_ARGUMENT);
  release(a);
  LEAVE(SUCCESS);
}

EXPORT ze_result_t zeCommandListCreateImmediate(const void *context, const void *device,
                                                const queue_desc_t *desc, void **list) {
  ENTER("zeCommandListCreateImmediate");
  struct fake_context *c = context_of(context);
  const int g = device_of(device);
  if (c == NULL || g < 0 || devices[g].driver != c->driver) LEAVE(INVALID_NULL_HANDLE);
  if (desc == NULL || list == NULL) LEAVE(INVALID_NULL_POINTER);
  if (desc->stype != 0xe || desc->mode < 0 || desc->mode > 2) LEAVE(INVALID_ARGUMENT);
  for (int i = 0; i < MAX_LISTS; ++i) {
    if (!lists[i].live) {
      memset(&lists[i], 0, sizeof lists[i]);
      lists[i].live = 1;
      lists[i].mode = desc->mode;
      lists[i].context = c;
      *list = &lists[i];
      LEAVE(SUCCESS);
    }
  }
  LEAVE(OUT_OF_HOST_MEMORY);
}

EXPORT ze_result_t zeCommandListAppendMemoryCopy(void *list, void *dst, const void *src,
                                                 size_t size, void *signal_event,
                                                 uint32_t wait_count, void **wait_events) {
  ENTER("zeCommandListAppendMemoryCopy");
  struct fake_list *l = list_of(list);
  if (l == NULL) LEAVE(INVALID_NULL_HANDLE);
  if (dst == NULL || src == NULL) LEAVE(INVALID_NULL_POINTER);
  if (signal_event != NULL || wait_count != 0 || wait_events != NULL) LEAVE(INVALID_ARGUMENT);
  void *to = resolve((uintptr_t)dst, size);
  const void *from = resolve((uintptr_t)src, size);
  if (to == NULL || from == NULL) LEAVE(INVALID_ARGUMENT);
  if (l->mode == MODE_SYNCHRONOUS) {
    memmove(to, from, size);
  } else {
    if (l->pending_count == MAX_PENDING) LEAVE(OUT_OF_HOST_MEMORY);
    l->pending[l->pending_count++] = (struct pending_copy){to, from, size};
  }
  LEAVE(SUCCESS);
}

#ifndef FAKE_ZE_API_1_0
EXPORT ze_result_t zeCommandListHostSynchronize(void *list, uint64_t timeout) {
  ENTER("zeCommandListHostSynchronize");
  struct fake_list *l = list_of(list);
  if (l == NULL) LEAVE(INVALID_NULL_HANDLE);
  (void)timeout;
  run_pending(l);
  LEAVE(SUCCESS);
}
#endif

EXPORT ze_result_t zeCommandListDestroy(void *list) {
  ENTER("zeCommandListDestroy");
  struct fake_list *l = list_of(list);
  if (l == NULL) LEAVE(INVALID_NULL_HANDLE);
  l->live = 0; /* copies never waited for are lost, as on a device that was not synchronised */
  LEAVE(SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_ze_reset(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live) release(&allocations[i]);
  }
  memset(contexts, 0, sizeof contexts);
  memset(lists, 0, sizeof lists);
  fake_calls_reset(&calls);
  initialized = 0;
  last_init_flags = 0;
  driver_count = FAKE_ZE_DRIVER_COUNT;
  fd_per_export = 0;
  /* Allocation ids keep growing: ids are never reused, across resets too. */
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_ze_set_fd_per_export(int on) {
  pthread_mutex_lock(&lock);
  fd_per_export = on;
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_ze_alloc(int driver, int device, size_t size, int memory, void **out) {
  if (driver < 0 || driver >= FAKE_ZE_DRIVER_COUNT) return INVALID_ARGUMENT;
  if (memory != TYPE_HOST && memory != TYPE_DEVICE && memory != TYPE_SHARED) return INVALID_ARGUMENT;
  int global = -1;
  for (int i = 0; i < FAKE_ZE_DEVICE_COUNT; ++i) {
    if (devices[i].driver == driver && devices[i].index == device) global = i;
  }
  if (global < 0 && memory != TYPE_HOST) return INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  const ze_result_t result = allocate(driver, global, memory, size, 0, -1, -1, out);
  LEAVE(result);
}

EXPORT int fake_ze_alloc_on_tile(int tile, size_t size, void **out) {
  if (tile < 0 || tile >= TILES) return INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  struct allocation *made = NULL;
  const ze_result_t result = allocate_buffer(0, 0, TYPE_DEVICE, size, 0, -1, tile, &made);
  if (result == SUCCESS) *out = (void *)made->base;
  LEAVE(result);
}

EXPORT int fake_ze_driver_export_fd(const void *ptr) {
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation(-1, (uintptr_t)ptr);
  const int fd = a != NULL ? buffer_of(a)->export_fd : -1;
  pthread_mutex_unlock(&lock);
  return fd;
}

EXPORT int fake_ze_free(void *ptr) {
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation(-1, (uintptr_t)ptr);
  if (a == NULL || a->is_pool || a->base != (uintptr_t)ptr) LEAVE(INVALID_ARGUMENT);
  release(a);
  LEAVE(SUCCESS);
}

EXPORT int fake_ze_read(const void *ptr, void *out, size_t size) {
  pthread_mutex_lock(&lock);
  const void *from = find_allocation(-1, (uintptr_t)ptr) != NULL ? resolve((uintptr_t)ptr, size) : NULL;
  if (from == NULL || out == NULL) LEAVE(INVALID_ARGUMENT);
  memcpy(out, from, size);
  LEAVE(SUCCESS);
}

EXPORT void fake_ze_set_failure(const char *name, int result) {
  fake_calls_set_failure(&calls, name, result, 0);
}

EXPORT void fake_ze_set_failure_once(const char *name, int result, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, result, nth);
}

EXPORT int fake_ze_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT void fake_ze_set_driver_count(int count) {
  pthread_mutex_lock(&lock);
  if (count >= 0 && count <= FAKE_ZE_DRIVER_COUNT) driver_count = count;
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_ze_live_contexts(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_CONTEXTS; ++i) count += contexts[i].live;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_ze_live_command_lists(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_LISTS; ++i) count += lists[i].live;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_ze_export_flags(const void *ptr) {
  pthread_mutex_lock(&lock);
  const struct allocation *a = find_allocation(-1, (uintptr_t)ptr);
  const int flags = a != NULL ? a->export_flags : -1;
  pthread_mutex_unlock(&lock);
  return flags;
}

EXPORT unsigned fake_ze_last_init_flags(void) {
  pthread_mutex_lock(&lock);
  const unsigned flags = last_init_flags;
  pthread_mutex_unlock(&lock);
  return flags;
}
