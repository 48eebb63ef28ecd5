/* The fake CUDA driver's memory: allocations, copies and host registration, and the one lookup
 * that says what an address is.  See fake_cuda_internal.h for the memory model. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_internal.h"
#include "fake_support.h"

#define REGION_SIZE (256ull << 20) /* address space reserved per device */

struct allocation allocations[MAX_ALLOCATIONS];
struct registration registrations[MAX_REGISTRATIONS];
static void *regions[FAKE_CUDA_DEVICE_COUNT];

static int cpu_accessible(int memory) {
  return memory == FAKE_CUDA_MEM_HOST || memory == FAKE_CUDA_MEM_MANAGED;
}

static void locate(CUdeviceptr ptr, struct located *out);

void fake_locate(CUdeviceptr ptr, struct located *out) {
  locate(ptr, out);
  out->ptr = ptr;
}

static void locate(CUdeviceptr ptr, struct located *out) {
  memset(out, 0, sizeof *out);
  out->device = -1;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *a = &allocations[i];
    if (a->live && ptr >= a->base && ptr < a->base + a->size) {
      *out = (struct located){PLACE_ALLOCATION, i,       a->device,    a->memory,    a->base,
                              a->size,          a->base, a->size,      a->buffer_id, a->buffer_id,
                              a->alias,         a->pooled, ptr};
      if (a->pooled) out->block_id = fake_pool_block_id(a->device, ptr);
      return;
    }
  }
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    const struct mapping *m = &mappings[i];
    if (m->live && ptr >= m->base && ptr < m->base + m->size) {
      const struct physical *p = &physicals[m->physical];
      const struct reservation *r = &reservations[m->reservation];
      *out = (struct located){PLACE_MAPPING, i,       p->device,    FAKE_CUDA_MEM_DEVICE,
                              m->base,       m->size, r->base,      r->size,
                              m->buffer_id,  p->block_id, p->alias + m->offset, 0, ptr};
      return;
    }
  }
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    const struct reservation *r = &reservations[i];
    if (r->live && ptr >= r->base && ptr < r->base + r->size) {
      out->place = PLACE_HOLE;
      out->index = i;
      out->range_base = r->base;
      out->range_size = r->size;
      return;
    }
  }
  for (int i = 0; i < MAX_REGISTRATIONS; ++i) {
    const struct registration *g = &registrations[i];
    if (g->live && ptr >= g->base && ptr < g->base + g->size) {
      *out = (struct located){PLACE_REGISTRATION, i,       g->device,    FAKE_CUDA_MEM_HOST,
                              g->base,            g->size, g->base,      g->size,
                              g->buffer_id,       g->buffer_id, (char *)g->base, 0, ptr};
      return;
    }
  }
}

/* The device's address range, reserved at its first allocation: never touched through this
 * address unless CPU-accessible memory lives there.  Lock held. */
static CUresult reserve_region(int device) {
  if (regions[device] != NULL) return SUCCESS;
  void *region = fake_reserve_device_range(REGION_SIZE);
  if (region == NULL) return OUT_OF_MEMORY;
  regions[device] = region;
  return SUCCESS;
}

/* The 2 MiB granules an allocation's backing spans: a packed one shares its granule. */
static CUdeviceptr footprint_start(const struct allocation *a) {
  return a->base / GRANULE * GRANULE;
}
static CUdeviceptr footprint_end(const struct allocation *a) {
  return fake_round_up(a->base + a->size, GRANULE);
}

/* Lock held. */
CUresult fake_place_allocation(int device, size_t size, int memory, int context, char *alias,
                               int fd, CUdeviceptr *out, int *index) {
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) return INVALID_DEVICE;
  if (size == 0 || size > REGION_SIZE - GRANULE || out == NULL) return INVALID_VALUE;
  if (reserve_region(device) != SUCCESS) return OUT_OF_MEMORY;
  /* First fit from the start of the region, so a freed address is handed out again first. */
  const CUdeviceptr region_start = fake_round_up((uintptr_t)regions[device], GRANULE);
  const CUdeviceptr region_end = (uintptr_t)regions[device] + REGION_SIZE;
  const size_t span = fake_round_up(size, GRANULE);
  CUdeviceptr candidate = region_start;
  int moved = 1;
  while (moved) {
    moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *a = &allocations[i];
      if (a->live && a->device == device && candidate < footprint_end(a) &&
          footprint_start(a) < candidate + span) {
        candidate = footprint_end(a);
        moved = 1;
      }
    }
  }
  if (candidate + span > region_end) return OUT_OF_MEMORY;
  if (alias == NULL) {
    /* CPU-accessible memory: its own address is the alias. */
    if (mprotect((void *)(uintptr_t)candidate, span, PROT_READ | PROT_WRITE) != 0) {
      return OUT_OF_MEMORY;
    }
    alias = (char *)(uintptr_t)candidate;
  }
  const CUresult result =
      fake_record_allocation(device, candidate, size, memory, context, alias, fd, index);
  if (result != SUCCESS) {
    if (alias == (char *)(uintptr_t)candidate) mprotect(alias, span, PROT_NONE);
    return result;
  }
  *out = candidate;
  return SUCCESS;
}

/* Lock held. */
CUresult fake_record_allocation(int device, CUdeviceptr base, size_t size, int memory,
                                int context, char *alias, int fd, int *index) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live) continue;
    allocations[i] = (struct allocation){.live = 1, .device = device, .memory = memory,
                                         .context = context, .base = base, .size = size,
                                         .buffer_id = fake_next_id(), .alias = alias, .fd = fd};
    if (index != NULL) *index = i;
    return SUCCESS;
  }
  return OUT_OF_MEMORY;
}

/* Small cuMemAlloc allocations.  Driver 580 on an H100 answered, for a 4 KiB cuMemAlloc,
 * MAPPING_BASE/SIZE "the 2 MiB chunk holding it (the same base only for the first allocation in
 * the chunk)" (docs/gpu.md): small allocations share 2 MiB chunks.  Here one under 2 MiB made
 * through cuMemAlloc is placed first fit at 512-byte alignment (assumed: CUDA guarantees "at
 * least 256 bytes") inside a 2 MiB chunk no larger allocation uses, never across a chunk's
 * end; larger ones, and fake_cuda_alloc's (whose tests place host memory over a freed range),
 * keep whole granules.  Its bytes are its own (a private alias): a copy never reaches a
 * neighbour's.  Lock held. */
#define PACKED_ALIGNMENT 512u

static CUresult place_packed(int device, size_t size, int context, char *alias, CUdeviceptr *out) {
  if (reserve_region(device) != SUCCESS) return OUT_OF_MEMORY;
  const CUdeviceptr region_end = (uintptr_t)regions[device] + REGION_SIZE;
  const uint64_t span = fake_round_up(size, PACKED_ALIGNMENT);
  CUdeviceptr candidate = fake_round_up((uintptr_t)regions[device], GRANULE);
  int moved = 1;
  while (moved) {
    moved = 0;
    if (candidate / GRANULE != (candidate + span - 1) / GRANULE) {
      candidate = fake_round_up(candidate, GRANULE);
      moved = 1;
    }
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *a = &allocations[i];
      if (!a->live || a->device != device || a->pooled) continue;
      const CUdeviceptr start = a->packed ? a->base : footprint_start(a);
      const CUdeviceptr end =
          a->packed ? fake_round_up(a->base + a->size, PACKED_ALIGNMENT) : footprint_end(a);
      if (candidate < end && start < candidate + span) {
        candidate = end;
        moved = 1;
      }
    }
  }
  if (candidate + span > region_end) return OUT_OF_MEMORY;
  int index = -1;
  const CUresult result = fake_record_allocation(device, candidate, size, FAKE_CUDA_MEM_DEVICE,
                                                 context, alias, -1, &index);
  if (result != SUCCESS) return result;
  allocations[index].packed = 1;
  *out = candidate;
  return SUCCESS;
}

int fake_packed_exportable(CUdeviceptr ptr, size_t size) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *a = &allocations[i];
    if (a->live && a->packed && a->base < ptr + size && ptr < a->base + a->size) {
      const CUdeviceptr chunk = footprint_start(a);
      return ptr >= chunk && ptr + size <= chunk + GRANULE;
    }
  }
  return 0;
}

/* Lock held. */
CUresult fake_allocate(int device, size_t size, int memory, int context, CUdeviceptr *out) {
  if (cpu_accessible(memory)) {
    return fake_place_allocation(device, size, memory, context, NULL, -1, out, NULL);
  }
  if (size == 0 || size > REGION_SIZE - GRANULE) return INVALID_VALUE;
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) return INVALID_DEVICE;
  if (context >= 0 && size < GRANULE) {
    char *alias = mmap(NULL, GRANULE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (alias == MAP_FAILED) return OUT_OF_MEMORY;
    const CUresult result = place_packed(device, size, context, alias, out);
    if (result != SUCCESS) munmap(alias, GRANULE);
    return result;
  }
  /* Device memory: private bytes only the fake touches (cuIpcGetMemHandle moves them to a
   * memfd when the allocation is exported, fake_cuda_ipc.c). */
  const size_t span = fake_round_up(size, GRANULE);
  char *alias =
      mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (alias == MAP_FAILED) return OUT_OF_MEMORY;
  const CUresult result = fake_place_allocation(device, size, memory, context, alias, -1, out, NULL);
  if (result != SUCCESS) munmap(alias, span);
  return result;
}

/* Lock held.  The bytes go away, as freed device memory does; pool memory goes back to its
 * pool, which keeps the bytes until it releases the chunk (fake_cuda_pool.c). */
void fake_release_allocation(struct allocation *a) {
  if (a->pooled) {
    memset(a, 0, sizeof *a);
    return;
  }
  const size_t span = fake_round_up(a->size, GRANULE);
  if (cpu_accessible(a->memory)) {
    madvise(a->alias, span, MADV_DONTNEED);
    mprotect(a->alias, span, PROT_NONE);
  } else {
    munmap(a->alias, span);
  }
  if (a->fd >= 0) close(a->fd);
  memset(a, 0, sizeof *a);
}

void fake_free_context_allocations(int device) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live && allocations[i].context == device) {
      fake_release_allocation(&allocations[i]);
    }
  }
  fake_pool_release_unused(device);
}

void fake_reset_memory(void) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live) fake_release_allocation(&allocations[i]);
  }
  fake_reset_pools();
  memset(registrations, 0, sizeof registrations);
}

/* Frees the allocation starting exactly at ptr: host memory only through cuMemFreeHost, other
 * memory only through cuMemFree, and never memory mapped by cuIpcOpenMemHandle ("must be freed
 * with cuIpcCloseMemHandle", cuda.h). */
static CUresult free_allocation(CUdeviceptr ptr, int host) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && a->base == ptr && !a->imported && (a->memory == FAKE_CUDA_MEM_HOST) == host) {
      fake_release_allocation(a);
      return SUCCESS;
    }
  }
  return INVALID_VALUE;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
  ENTER("cuMemAlloc_v2");
  REQUIRE_CONTEXT();
  const int device = fake_current_device();
  LEAVE(fake_allocate(device, size, FAKE_CUDA_MEM_DEVICE, device, ptr));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *ptr, size_t size, unsigned int flags) {
  ENTER("cuMemAllocManaged");
  REQUIRE_CONTEXT();
  if (flags != 1 && flags != 2) LEAVE(INVALID_VALUE); /* ATTACH_GLOBAL or ATTACH_HOST */
  const int device = fake_current_device();
  LEAVE(fake_allocate(device, size, FAKE_CUDA_MEM_MANAGED, device, ptr));
}

EXPORT CUresult cuMemHostAlloc(void **ptr, size_t size, unsigned int flags) {
  ENTER("cuMemHostAlloc");
  REQUIRE_CONTEXT();
  if (ptr == NULL || (flags & ~7u) != 0) LEAVE(INVALID_VALUE);
  const int device = fake_current_device();
  CUdeviceptr address = 0;
  const CUresult result = fake_allocate(device, size, FAKE_CUDA_MEM_HOST, device, &address);
  if (result == SUCCESS) *ptr = (void *)(uintptr_t)address;
  LEAVE(result);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  ENTER("cuMemFree_v2");
  REQUIRE_CONTEXT();
  LEAVE(free_allocation(ptr, 0));
}

EXPORT CUresult cuMemFreeHost(void *ptr) {
  ENTER("cuMemFreeHost");
  REQUIRE_CONTEXT();
  LEAVE(free_allocation((uintptr_t)ptr, 1));
}

/* Copies through the aliases, segment by segment: a range may cross VMM mappings.  Fails
 * without copying anything if any byte is not memory a copy may reach.  Lock held. */
static CUresult device_copy(CUdeviceptr ptr, char *host, size_t n, int to_device) {
  for (int pass = 0; pass < 2; ++pass) { /* pass 0 checks, pass 1 copies */
    size_t done = 0;
    while (done < n) {
      struct located at;
      fake_locate(ptr + done, &at);
      if (at.alias == NULL ||
          (at.place == PLACE_MAPPING && !mappings[at.index].accessible)) {
        return INVALID_VALUE;
      }
      const size_t offset = (size_t)(ptr + done - at.base);
      size_t chunk = at.size - offset;
      if (chunk > n - done) chunk = n - done;
      if (pass == 1) {
        if (to_device) {
          memcpy(at.alias + offset, host + done, chunk);
        } else {
          memcpy(host + done, at.alias + offset, chunk);
        }
      }
      done += chunk;
    }
  }
  return SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr destination, const void *source, size_t bytes) {
  ENTER("cuMemcpyHtoD_v2");
  REQUIRE_CONTEXT();
  if (source == NULL) LEAVE(INVALID_VALUE);
  LEAVE(device_copy(destination, (char *)(uintptr_t)source, bytes, 1));
}

EXPORT CUresult cuMemcpyDtoH_v2(void *destination, CUdeviceptr source, size_t bytes) {
  ENTER("cuMemcpyDtoH_v2");
  REQUIRE_CONTEXT();
  if (destination == NULL) LEAVE(INVALID_VALUE);
  LEAVE(device_copy(source, destination, bytes, 0));
}

EXPORT CUresult cuMemHostRegister_v2(void *ptr, size_t size, unsigned int flags) {
  ENTER("cuMemHostRegister_v2");
  REQUIRE_CONTEXT();
  const uintptr_t base = (uintptr_t)ptr;
  if (ptr == NULL || size == 0 || base + size < base || (flags & ~0xfu) != 0) {
    LEAVE(INVALID_VALUE);
  }
  for (int i = 0; i < MAX_REGISTRATIONS; ++i) {
    const struct registration *g = &registrations[i];
    if (g->live && base < g->base + g->size && g->base < base + size) {
      LEAVE(HOST_MEMORY_ALREADY_REGISTERED);
    }
  }
  for (int i = 0; i < MAX_REGISTRATIONS; ++i) {
    if (!registrations[i].live) {
      registrations[i] =
          (struct registration){1, fake_current_device(), base, size, fake_next_id()};
      LEAVE(SUCCESS);
    }
  }
  LEAVE(OUT_OF_MEMORY);
}

EXPORT CUresult cuMemHostUnregister(void *ptr) {
  ENTER("cuMemHostUnregister");
  REQUIRE_CONTEXT();
  for (int i = 0; i < MAX_REGISTRATIONS; ++i) {
    if (registrations[i].live && registrations[i].base == (uintptr_t)ptr) {
      memset(&registrations[i], 0, sizeof registrations[i]);
      LEAVE(SUCCESS);
    }
  }
  LEAVE(HOST_MEMORY_NOT_REGISTERED);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT int fake_cuda_alloc(int device, size_t size, int memory, unsigned long long *out) {
  if (memory != FAKE_CUDA_MEM_DEVICE && memory != FAKE_CUDA_MEM_HOST &&
      memory != FAKE_CUDA_MEM_MANAGED) {
    return INVALID_VALUE;
  }
  pthread_mutex_lock(&fake_lock);
  LEAVE(fake_allocate(device, size, memory, -1, out));
}

EXPORT int fake_cuda_free(unsigned long long ptr) {
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live && allocations[i].base == ptr) {
      fake_release_allocation(&allocations[i]);
      LEAVE(SUCCESS);
    }
  }
  LEAVE(INVALID_VALUE);
}

/* The fake's own view of device bytes, so tests can check what a copy did without trusting
 * the copy in the other direction.  Ignores cuMemSetAccess, as a debugger would. */
static int peek_or_poke(unsigned long long ptr, void *buffer, size_t len, int poke) {
  pthread_mutex_lock(&fake_lock);
  size_t done = 0;
  while (done < len) {
    struct located at;
    fake_locate(ptr + done, &at);
    if (at.alias == NULL) LEAVE(INVALID_VALUE);
    const size_t offset = (size_t)(ptr + done - at.base);
    size_t chunk = at.size - offset;
    if (chunk > len - done) chunk = len - done;
    if (poke) {
      memcpy(at.alias + offset, (char *)buffer + done, chunk);
    } else {
      memcpy((char *)buffer + done, at.alias + offset, chunk);
    }
    done += chunk;
  }
  LEAVE(SUCCESS);
}

EXPORT int fake_cuda_peek(unsigned long long ptr, void *out, size_t len) {
  return peek_or_poke(ptr, out, len, 0);
}

EXPORT int fake_cuda_poke(unsigned long long ptr, const void *in, size_t len) {
  return peek_or_poke(ptr, (void *)(uintptr_t)in, len, 1);
}

EXPORT int fake_cuda_host_registration_count(void) {
  pthread_mutex_lock(&fake_lock);
  int count = 0;
  for (int i = 0; i < MAX_REGISTRATIONS; ++i) count += registrations[i].live;
  LEAVE(count);
}
