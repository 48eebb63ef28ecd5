/* The fake CUDA driver's virtual memory management: reserve an address range, create physical
 * memory, map it (several segments back to back, as PyTorch's expandable segments do), grant
 * access, unmap, release.  Checks follow cuda.h: sizes and offsets in whole granules, a mapping
 * inside one reservation and over nothing else, unmapping whole mappings only. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "fake_cuda_internal.h"
#include "fake_support.h"

struct physical physicals[MAX_PHYSICAL];
struct reservation reservations[MAX_RESERVATIONS];
struct mapping mappings[MAX_MAPPINGS];

/* CUmemAllocationProp and CUmemAccessDesc as cuda.h lays them out. */
struct allocation_prop {
  int type;
  int requested_handle_types;
  int location_type;
  int location_id;
  void *win32_metadata;
  unsigned char compression_type;
  unsigned char gpu_direct_rdma_capable;
  unsigned short usage;
  unsigned char reserved[4];
};

struct access_desc {
  int location_type;
  int location_id;
  int flags;
};

enum { ALLOCATION_PINNED = 1, LOCATION_DEVICE = 1, ACCESS_READWRITE = 3 };

static CUresult check_prop(const struct allocation_prop *prop) {
  if (prop == NULL || prop->type != ALLOCATION_PINNED || prop->location_type != LOCATION_DEVICE) {
    return INVALID_VALUE;
  }
  if (prop->location_id < 0 || prop->location_id >= FAKE_CUDA_DEVICE_COUNT) return INVALID_DEVICE;
  return SUCCESS;
}

/* Handles are index + 1, so 0 is never a handle. */
static struct physical *physical_of(unsigned long long handle) {
  if (handle == 0 || handle > MAX_PHYSICAL) return NULL;
  struct physical *p = &physicals[handle - 1];
  return p->live ? p : NULL;
}

static int mapping_count(int physical) {
  int count = 0;
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    count += mappings[i].live && mappings[i].physical == physical;
  }
  return count;
}

static void free_physical_if_unused(int index) {
  struct physical *p = &physicals[index];
  if (p->live && p->released && mapping_count(index) == 0) {
    munmap(p->alias, p->size);
    memset(p, 0, sizeof *p);
  }
}

/* The mappings [ptr, ptr + size) consists of, exactly: none cut, no gap.  Lock held. */
static int whole_mappings(CUdeviceptr ptr, size_t size) {
  if (size == 0) return 0;
  CUdeviceptr cursor = ptr;
  while (cursor < ptr + size) {
    struct located at;
    fake_locate(cursor, &at);
    if (at.place != PLACE_MAPPING || at.base != cursor || at.base + at.size > ptr + size) return 0;
    cursor = at.base + at.size;
  }
  return 1;
}

void fake_reset_vmm(void) {
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    if (reservations[i].live) munmap((void *)(uintptr_t)reservations[i].base, reservations[i].size);
  }
  for (int i = 0; i < MAX_PHYSICAL; ++i) {
    if (physicals[i].live) munmap(physicals[i].alias, physicals[i].size);
  }
  memset(reservations, 0, sizeof reservations);
  memset(physicals, 0, sizeof physicals);
  memset(mappings, 0, sizeof mappings);
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                              const struct allocation_prop *prop, int option) {
  ENTER("cuMemGetAllocationGranularity");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (granularity == NULL || (option != 0 && option != 1)) LEAVE(INVALID_VALUE);
  const CUresult result = check_prop(prop);
  if (result != SUCCESS) LEAVE(result);
  *granularity = GRANULE;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size,
                            const struct allocation_prop *prop, unsigned long long flags) {
  ENTER("cuMemCreate");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (handle == NULL || size == 0 || size % GRANULE != 0 || flags != 0) LEAVE(INVALID_VALUE);
  const CUresult result = check_prop(prop);
  if (result != SUCCESS) LEAVE(result);
  for (int i = 0; i < MAX_PHYSICAL; ++i) {
    if (physicals[i].live) continue;
    char *alias = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (alias == MAP_FAILED) LEAVE(OUT_OF_MEMORY);
    physicals[i] = (struct physical){1,    0,    prop->location_id, prop->gpu_direct_rdma_capable,
                                     size, fake_next_id(), alias};
    *handle = (unsigned long long)i + 1;
    LEAVE(SUCCESS);
  }
  LEAVE(OUT_OF_MEMORY);
}

EXPORT CUresult cuMemRelease(unsigned long long handle) {
  ENTER("cuMemRelease");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  struct physical *p = physical_of(handle);
  if (p == NULL || p->released) LEAVE(INVALID_VALUE);
  p->released = 1;
  free_physical_if_unused((int)(p - physicals));
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr hint, unsigned long long flags) {
  ENTER("cuMemAddressReserve");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  (void)hint; /* only a hint */
  if (ptr == NULL || size == 0 || size % GRANULE != 0 || flags != 0 ||
      (alignment & (alignment - 1)) != 0) {
    LEAVE(INVALID_VALUE);
  }
  const size_t align = alignment > GRANULE ? alignment : GRANULE;
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    if (reservations[i].live) continue;
    /* Over-reserve, then trim to an aligned start: PROT_NONE, so the CPU can never touch it. */
    char *raw = fake_reserve_device_range(size + align);
    if (raw == NULL) LEAVE(OUT_OF_MEMORY);
    const uintptr_t start = fake_round_up((uintptr_t)raw, align);
    if (start > (uintptr_t)raw) munmap(raw, start - (uintptr_t)raw);
    const uintptr_t tail = start + size;
    const uintptr_t raw_end = (uintptr_t)raw + size + align;
    if (raw_end > tail) munmap((void *)tail, raw_end - tail);
    reservations[i] = (struct reservation){1, start, size};
    *ptr = start;
    LEAVE(SUCCESS);
  }
  LEAVE(OUT_OF_MEMORY);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemAddressFree");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    struct reservation *r = &reservations[i];
    if (!r->live || r->base != ptr || r->size != size) continue;
    for (int m = 0; m < MAX_MAPPINGS; ++m) {
      if (mappings[m].live && mappings[m].reservation == i) LEAVE(INVALID_VALUE); /* unmap first */
    }
    munmap((void *)(uintptr_t)r->base, r->size);
    memset(r, 0, sizeof *r);
    LEAVE(SUCCESS);
  }
  LEAVE(INVALID_VALUE);
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle,
                         unsigned long long flags) {
  ENTER("cuMemMap");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  struct physical *p = physical_of(handle);
  if (p == NULL || p->released || flags != 0 || size == 0 || size % GRANULE != 0 ||
      offset % GRANULE != 0 || offset + size > p->size || ptr % GRANULE != 0) {
    LEAVE(INVALID_VALUE);
  }
  struct located at;
  fake_locate(ptr, &at);
  if (at.place != PLACE_HOLE || ptr + size > at.range_base + at.range_size) LEAVE(INVALID_VALUE);
  const int reservation = at.index;
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    const struct mapping *m = &mappings[i];
    if (m->live && m->base < ptr + size && ptr < m->base + m->size) LEAVE(INVALID_VALUE);
  }
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (mappings[i].live) continue;
    mappings[i] = (struct mapping){1,   0,    (int)(p - physicals), reservation,
                                   ptr, size, offset,               fake_next_id()};
    LEAVE(SUCCESS);
  }
  LEAVE(OUT_OF_MEMORY);
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const struct access_desc *descriptors,
                               size_t count) {
  ENTER("cuMemSetAccess");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (descriptors == NULL || count == 0 || !whole_mappings(ptr, size)) LEAVE(INVALID_VALUE);
  int readwrite = 0;
  for (size_t i = 0; i < count; ++i) {
    const struct access_desc *d = &descriptors[i];
    if (d->location_type != LOCATION_DEVICE) LEAVE(INVALID_VALUE);
    if (d->location_id < 0 || d->location_id >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
    if (d->flags != 0 && d->flags != 1 && d->flags != ACCESS_READWRITE) LEAVE(INVALID_VALUE);
    readwrite |= d->flags == ACCESS_READWRITE;
  }
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    struct mapping *m = &mappings[i];
    if (m->live && m->base >= ptr && m->base + m->size <= ptr + size) m->accessible = readwrite;
  }
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemUnmap");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (!whole_mappings(ptr, size)) LEAVE(INVALID_VALUE);
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    struct mapping *m = &mappings[i];
    if (m->live && m->base >= ptr && m->base + m->size <= ptr + size) {
      const int physical = m->physical;
      memset(m, 0, sizeof *m);
      free_physical_if_unused(physical);
    }
  }
  LEAVE(SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_cuda_vmm_live(int *reservation_count, int *mapping_count, int *physical_count) {
  pthread_mutex_lock(&fake_lock);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < MAX_RESERVATIONS; ++i) counts[0] += reservations[i].live;
  for (int i = 0; i < MAX_MAPPINGS; ++i) counts[1] += mappings[i].live;
  for (int i = 0; i < MAX_PHYSICAL; ++i) counts[2] += physicals[i].live;
  pthread_mutex_unlock(&fake_lock);
  if (reservation_count != NULL) *reservation_count = counts[0];
  if (mapping_count != NULL) *mapping_count = counts[1];
  if (physical_count != NULL) *physical_count = counts[2];
}
