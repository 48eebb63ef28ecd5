/* A fake CUDA driver: a real shared object named libcuda.so.1 with the driver API entry points
 * hmr's CUDA iface dlsyms, so the real iface code runs without a GPU.
 *
 * Two devices.  This file: initialisation, devices, pointer attributes, dma-buf export, error
 * strings and the test-only controls.  Memory (allocations, copies, host registration) is in
 * fake_cuda_memory.c, VMM in fake_cuda_vmm.c, stream-ordered pools in fake_cuda_pool.c, CUDA IPC
 * in fake_cuda_ipc.c, contexts in fake_cuda_context.c; the memory model
 * is described in fake_cuda_internal.h.  dma-buf export returns a real fd (a memfd sized to the
 * exported range), so fd ownership is real. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_internal.h"
#include "fake_support.h"

#define MAX_OVERRIDES 16

struct attribute_override {
  int device, attribute, value;
};

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
int fake_initialized;
int fake_forked_child;
static unsigned long long next_id = 1;
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;
static struct attribute_override overrides[MAX_OVERRIDES];
static CUdeviceptr last_export_ptr;
static size_t last_export_size;
static unsigned long long last_export_flags;

CUresult fake_enter(const char *name) { return fake_calls_enter(&calls, name); }

unsigned long long fake_next_id(void) { return next_id++; }

uint64_t fake_round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

static void mark_forked_child(void) { fake_forked_child = 1; }

EXPORT CUresult cuInit(unsigned int flags) {
  ENTER("cuInit");
  if (flags != 0) LEAVE(INVALID_VALUE);
  if (fake_initialized && fake_forked_child) LEAVE(NOT_INITIALIZED);
  if (!fake_initialized) pthread_atfork(NULL, NULL, mark_forked_child);
  fake_initialized = 1;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDriverGetVersion(int *version) {
  ENTER("cuDriverGetVersion");
  if (version == NULL) LEAVE(INVALID_VALUE);
  *version = 12080;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  ENTER("cuDeviceGetCount");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (count == NULL) LEAVE(INVALID_VALUE);
  *count = FAKE_CUDA_DEVICE_COUNT;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (device == NULL) LEAVE(INVALID_VALUE);
  if (ordinal < 0 || ordinal >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  *device = ordinal;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  ENTER("cuDeviceGetAttribute");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (value == NULL) LEAVE(INVALID_VALUE);
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  for (int i = 0; i < MAX_OVERRIDES; ++i) {
    if (overrides[i].device == device && overrides[i].attribute == attribute) {
      *value = overrides[i].value;
      LEAVE(SUCCESS);
    }
  }
  switch (attribute) {
    case 33: *value = device == 0 ? 0x17 : 0x65; break; /* PCI_BUS_ID */
    case 34: *value = 0; break;                        /* PCI_DEVICE_ID */
    case 41: *value = 1; break;                        /* UNIFIED_ADDRESSING */
    case 50: *value = 0; break;                        /* PCI_DOMAIN_ID */
    case 102: *value = 1; break;                       /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    case 110: *value = 1; break;                       /* GPU_DIRECT_RDMA_WITH_CUDA_VMM */
    case 115: *value = 1; break;                       /* MEMORY_POOLS_SUPPORTED */
    case 116: *value = 1; break;                       /* GPU_DIRECT_RDMA_SUPPORTED */
    /* DMA_BUF_SUPPORTED: only device 0, so "per device, not device 0 for all" is visible. */
    case 124: *value = device == 0; break;
    default: LEAVE(INVALID_VALUE);
  }
  LEAVE(SUCCESS);
}

/* One pointer attribute.  What the fake reports follows cuda.h's descriptions; where a real
 * driver's answer is not documented (marked "assumed") the fake picks the plausible one:
 *   BUFFER_ID        a new id per allocation and per cuMemMap mapping (assumed per mapping)
 *   RANGE_START/SIZE the VMM reservation, or the allocation itself
 *   MAPPING_BASE/SIZE the mapping (VMM segment), or for other allocations their physical
 *                    backing: the allocation rounded out to 2 MiB (as driver 580 on an H100
 *                    answers: 4 MiB for a 3 MiB + 123 B cuMemAlloc, docs/gpu.md); 0 where
 *                    nothing is mapped; for pool memory (fake_cuda_pool.c) the pool's
 *                    32 MiB chunk that holds the address.  The failure
 *                    "cuPointerGetAttributes:mapping" makes them INVALID_VALUE, as a driver
 *                    without them answers
 *   MEMPOOL_HANDLE   the pool (cuDeviceGetDefaultMemPool's handle) for pool memory, else null
 *   MEMORY_BLOCK_ID  the cuMemCreate handle; the pool chunk's for pool memory; the buffer id
 *                    for other allocations, small cuMemAllocs sharing a chunk included
 *                    (assumed: a real driver may name the shared chunk, as MAPPING does)
 *   unmapped reservation: memory type 0, MAPPED 0, ordinal -1 (assumed). */
static CUresult pointer_attribute(void *data, int attribute, const struct located *at) {
  const int mapped = at->place != PLACE_NONE && at->place != PLACE_HOLE;
  const uint64_t backing = 2u << 20;
  const uint64_t pool_chunk = 32u << 20;
  const int whole_mapping = at->place == PLACE_MAPPING;
  if ((attribute == 18 || attribute == 19) &&
      fake_calls_failure(&calls, "cuPointerGetAttributes:mapping") != 0) {
    return INVALID_VALUE;
  }
  switch (attribute) {
    case 2: /* MEMORY_TYPE: managed memory reads as device memory, told apart by IS_MANAGED */
      *(unsigned int *)data = at->memory == FAKE_CUDA_MEM_MANAGED ? 2u : (unsigned)at->memory;
      break;
    /* SYNC_MEMOPS, IS_MANAGED and MAPPED: cuda.h documents each as "a boolean", and NVIDIA's
     * cuda-python reads them as one.  Written as one byte, the narrowest a driver may write,
     * so a caller that reads a wider, unzeroed integer reads garbage here too. */
    case 6:
      *(unsigned char *)data = at->place == PLACE_ALLOCATION && allocations[at->index].sync_memops;
      break;
    case 7: /* BUFFER_ID: cuda.h, "a buffer ID which is guaranteed to be unique within the
             * process" for memory "obtained from a CUDA memory allocation API"; for any other
             * pointer cuPointerGetAttributes assigns "default NULL values" instead of failing.
             * The pseudo-failure "cuPointerGetAttributes:no_buffer_id" answers that 0 for memory
             * the fake otherwise calls device memory (as for a range the driver does not count
             * as allocated through it: hmr's guard against caching what nothing tells apart). */
      *(unsigned long long *)data =
          fake_calls_failure(&calls, "cuPointerGetAttributes:no_buffer_id") != 0 ? 0 : at->buffer_id;
      break;
    case 8: *(unsigned char *)data = at->memory == FAKE_CUDA_MEM_MANAGED; break;
    case 9: *(int *)data = at->device; break;
    case 11: *(CUdeviceptr *)data = at->range_base; break;
    case 12: *(size_t *)data = at->range_size; break;
    case 13: *(unsigned char *)data = (unsigned char)(mapped != 0); break;
    case 17: *(void **)data = at->pooled ? fake_pool_handle(at->device) : NULL; break;
    case 18:
      *(size_t *)data = !mapped        ? 0
                        : at->pooled   ? pool_chunk
                        : whole_mapping ? at->size
                                        : fake_round_up(at->base + at->size, backing) -
                                              at->base / backing * backing;
      break;
    case 19:
      *(CUdeviceptr *)data = !mapped        ? 0
                             : at->pooled   ? at->ptr / pool_chunk * pool_chunk
                             : whole_mapping ? at->base
                                             : at->base / backing * backing;
      break;
    case 20: *(unsigned long long *)data = at->block_id; break;
    default: return INVALID_VALUE;
  }
  return SUCCESS;
}

/* cuPointerSetAttribute, as cuda.h documents it: SYNC_MEMOPS (6) is the only attribute it
 * sets, a boolean read through `value`, on memory allocated by CUDA's allocation APIs
 * (cuMemAlloc, cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister in its \sa list); anything
 * else is INVALID_VALUE.  VMM mappings answer NOT_SUPPORTED: assumed from public reports of
 * cuPointerSetAttribute(SYNC_MEMOPS) on cuMemCreate memory (not documented in cuda.h). */
EXPORT CUresult cuPointerSetAttribute(const void *value, int attribute, CUdeviceptr ptr) {
  ENTER("cuPointerSetAttribute");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  REQUIRE_CONTEXT(); /* INVALID_CONTEXT is one of its documented returns */
  if (value == NULL || attribute != 6) LEAVE(INVALID_VALUE);
  struct located at;
  fake_locate(ptr, &at);
  if (at.place == PLACE_MAPPING) LEAVE(NOT_SUPPORTED);
  if (at.place != PLACE_ALLOCATION) LEAVE(INVALID_VALUE);
  allocations[at.index].sync_memops = *(const unsigned char *)value != 0;  /* a boolean */
  LEAVE(SUCCESS);
}

EXPORT int fake_cuda_sync_memops(unsigned long long ptr) {
  pthread_mutex_lock(&fake_lock);
  struct located at;
  fake_locate(ptr, &at);
  const int value = at.place == PLACE_ALLOCATION ? (int)allocations[at.index].sync_memops : -1;
  pthread_mutex_unlock(&fake_lock);
  return value;
}

EXPORT CUresult cuPointerGetAttributes(unsigned int count, int *attributes, void **data,
                                       CUdeviceptr ptr) {
  ENTER("cuPointerGetAttributes");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (attributes == NULL || data == NULL) LEAVE(INVALID_VALUE);
  struct located at;
  fake_locate(ptr, &at);
  for (unsigned int i = 0; i < count; ++i) {
    CUresult result = pointer_attribute(data[i], attributes[i], &at);
    if (result != SUCCESS) LEAVE(result);
  }
  LEAVE(SUCCESS);
}

/* Like the driver: for VMM memory only the one mapping (segment) that holds ptr.  And like
 * it, only with a current context: driver 580 on an H100 answers INVALID_CONTEXT on a thread
 * without one (docs/gpu.md), which an earlier version of this fake did not model. */
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  ENTER("cuMemGetAddressRange_v2");
  REQUIRE_CONTEXT();
  struct located at;
  fake_locate(ptr, &at);
  if (at.place == PLACE_NONE || at.place == PLACE_HOLE) LEAVE(NOT_FOUND);
  if (base != NULL) *base = at.base;
  if (size != NULL) *size = at.size;
  LEAVE(SUCCESS);
}

/* Whether [ptr, ptr + size) may be exported, as cuda.h documents it: inside one allocation
 * (whole pages of it), or fully mapped VMM segments of one reservation, one device and the
 * same allocation properties; pool memory where its pool has backed every byte, and a small
 * cuMemAlloc inside its shared 2 MiB chunk (both assumed).  Managed and registered memory are never exported.  Lock held. */
static int exportable(CUdeviceptr ptr, size_t size, uint64_t page) {
  if (fake_pool_exportable(ptr, size)) return 1;
  /* A page-rounded range of a small cuMemAlloc may start in a neighbour or a gap of its
   * shared chunk: accepted inside the chunk (assumed, as for pool memory). */
  if (fake_packed_exportable(ptr, size)) return 1;
  struct located first;
  fake_locate(ptr, &first);
  if (first.place == PLACE_ALLOCATION && !first.pooled) {
    return first.memory != FAKE_CUDA_MEM_MANAGED &&
           ptr + size <= first.base + fake_round_up(first.size, page);
  }
  if (first.place != PLACE_MAPPING) return 0;
  const struct physical *first_memory = &physicals[mappings[first.index].physical];
  CUdeviceptr cursor = first.base + first.size;
  while (cursor < ptr + size) {
    struct located next;
    fake_locate(cursor, &next);
    if (next.place != PLACE_MAPPING || next.range_base != first.range_base ||
        next.device != first.device ||
        physicals[mappings[next.index].physical].gpu_direct_rdma !=
            first_memory->gpu_direct_rdma) {
      return 0;
    }
    cursor = next.base + next.size;
  }
  return 1;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr ptr, size_t size, int type,
                                              unsigned long long flags) {
  ENTER("cuMemGetHandleForAddressRange");
  REQUIRE_CONTEXT(); /* INVALID_CONTEXT without one, as driver 580 answers (docs/gpu.md) */
  if (flags & 1ull) {
    const int pcie_failure = fake_calls_failure(&calls, "cuMemGetHandleForAddressRange:pcie");
    if (pcie_failure != 0) LEAVE(pcie_failure);
  }
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (handle == NULL || type != 1 || size == 0 || (flags & ~1ull) != 0 || ptr % page != 0 ||
      size % page != 0 || !exportable(ptr, size, page)) {
    LEAVE(INVALID_VALUE);
  }
  /* A real fd, so RLIMIT_NOFILE limits exports as it limits the driver's dma-buf fds
   * (dma_buf_fd in the kernel).  CUDA documents no code for a full table; hmr asks the table
   * itself (registration/device_registration.cpp), so this one serves as any would. */
  int fd = memfd_create("fake-cuda-dmabuf", MFD_CLOEXEC);
  if (fd < 0) LEAVE(OUT_OF_MEMORY);
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    LEAVE(OUT_OF_MEMORY);
  }
  *(int *)handle = fd;
  last_export_ptr = ptr;
  last_export_size = size;
  last_export_flags = flags;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
  if (text == NULL) return INVALID_VALUE;
  switch (error) {
    case SUCCESS: *text = "no error"; break;
    case INVALID_VALUE: *text = "invalid argument"; break;
    case OUT_OF_MEMORY: *text = "out of memory"; break;
    case NOT_INITIALIZED: *text = "initialization error"; break;
    case 100: *text = "no CUDA-capable device is detected"; break;
    case INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case INVALID_CONTEXT: *text = "invalid device context"; break;
    case INVALID_HANDLE: *text = "invalid resource handle"; break;
    case NOT_FOUND: *text = "named symbol not found"; break;
    case HOST_MEMORY_ALREADY_REGISTERED:
      *text = "part or all of the requested memory range is already mapped";
      break;
    case HOST_MEMORY_NOT_REGISTERED:
      *text = "pointer does not correspond to a registered memory region";
      break;
    case NOT_SUPPORTED: *text = "operation not supported"; break;
    default: *text = "fake: unknown error"; return INVALID_VALUE;
  }
  return SUCCESS;
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_cuda_reset(void) {
  pthread_mutex_lock(&fake_lock);
  fake_initialized = 0;
  fake_reset_vmm();
  fake_reset_memory();
  fake_reset_contexts();
  fake_calls_reset(&calls);
  memset(overrides, 0xff, sizeof overrides); /* device -1: unused */
  last_export_ptr = 0;
  last_export_size = 0;
  last_export_flags = 0;
  /* Ids keep growing: ids are never reused, across resets too. */
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_cuda_set_failure(const char *name, int code) {
  fake_calls_set_failure(&calls, name, code, 0);
}

EXPORT void fake_cuda_set_failure_once(const char *name, int code, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, code, nth);
}

EXPORT void fake_cuda_set_device_attribute(int device, int attribute, int value) {
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < MAX_OVERRIDES; ++i) {
    if (overrides[i].device == -1 ||
        (overrides[i].device == device && overrides[i].attribute == attribute)) {
      overrides[i] = (struct attribute_override){device, attribute, value};
      break;
    }
  }
  pthread_mutex_unlock(&fake_lock);
}

EXPORT int fake_cuda_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT void fake_cuda_last_export(unsigned long long *ptr, size_t *size,
                                  unsigned long long *flags) {
  pthread_mutex_lock(&fake_lock);
  *ptr = last_export_ptr;
  *size = last_export_size;
  *flags = last_export_flags;
  pthread_mutex_unlock(&fake_lock);
}

/* Overrides start unused (device -1) even before the first reset. */
__attribute__((constructor)) static void fake_cuda_load(void) {
  memset(overrides, 0xff, sizeof overrides);
}
