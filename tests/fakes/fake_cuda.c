/* A fake CUDA driver: a real shared object named libcuda.so.1 with the driver API entry points
 * hmr's CUDA iface dlsyms, so the real iface code runs without a GPU.
 *
 * Two devices.  Device memory comes from a PROT_NONE address range reserved per device: the
 * addresses are real and distinct per device, and a CPU touch would fault, which is how "the CPU
 * never touches device memory" is checked.  Every allocation gets a new buffer id.  dma-buf
 * export returns a real fd (a memfd sized to the exported range), so fd ownership is real. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_control.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
  SUCCESS = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  NOT_INITIALIZED = 3,
  INVALID_DEVICE = 101,
  NOT_FOUND = 500,
};

#define REGION_SIZE (256ull << 20) /* address space reserved per device */
#define GRANULE (2ull << 20)       /* cuMemAlloc's allocation granularity */
#define MAX_ALLOCATIONS 128
#define MAX_FAILURES 16
#define MAX_COUNTERS 32
#define MAX_OVERRIDES 16
#define NAME_LEN 64

struct allocation {
  int live;
  int device;
  int memory;
  CUdeviceptr base;
  size_t size;
  unsigned long long buffer_id;
};

struct named_value {
  char name[NAME_LEN];
  int value;
};

struct attribute_override {
  int device, attribute, value;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static void *regions[FAKE_CUDA_DEVICE_COUNT];
static struct allocation allocations[MAX_ALLOCATIONS];
static unsigned long long next_buffer_id = 1;
static struct named_value failures[MAX_FAILURES];
static struct named_value counters[MAX_COUNTERS];
static struct attribute_override overrides[MAX_OVERRIDES];
static CUdeviceptr last_export_ptr;
static size_t last_export_size;
static unsigned long long last_export_flags;

static struct named_value *find_named(struct named_value *table, int count, const char *name,
                                      int create) {
  for (int i = 0; i < count; ++i) {
    if (table[i].name[0] != '\0' && strcmp(table[i].name, name) == 0) return &table[i];
  }
  if (!create) return NULL;
  for (int i = 0; i < count; ++i) {
    if (table[i].name[0] == '\0') {
      strncpy(table[i].name, name, NAME_LEN - 1);
      return &table[i];
    }
  }
  return NULL;
}

/* Counts the call and returns the injected failure for `name`, or SUCCESS. Lock held. */
static CUresult enter(const char *name) {
  struct named_value *counter = find_named(counters, MAX_COUNTERS, name, 1);
  if (counter != NULL) counter->value++;
  struct named_value *failure = find_named(failures, MAX_FAILURES, name, 0);
  return failure != NULL ? failure->value : SUCCESS;
}

static struct allocation *find_allocation(CUdeviceptr ptr) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && ptr >= a->base && ptr < a->base + a->size) return a;
  }
  return NULL;
}

static uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

#define ENTER(name)                   \
  pthread_mutex_lock(&lock);          \
  CUresult injected = enter(name);    \
  if (injected != SUCCESS) {          \
    pthread_mutex_unlock(&lock);      \
    return injected;                  \
  }

#define LEAVE(result)            \
  do {                           \
    pthread_mutex_unlock(&lock); \
    return (result);             \
  } while (0)

EXPORT CUresult cuInit(unsigned int flags) {
  ENTER("cuInit");
  if (flags != 0) LEAVE(INVALID_VALUE);
  initialized = 1;
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
  if (!initialized) LEAVE(NOT_INITIALIZED);
  if (count == NULL) LEAVE(INVALID_VALUE);
  *count = FAKE_CUDA_DEVICE_COUNT;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet");
  if (!initialized) LEAVE(NOT_INITIALIZED);
  if (device == NULL) LEAVE(INVALID_VALUE);
  if (ordinal < 0 || ordinal >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  *device = ordinal;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  ENTER("cuDeviceGetAttribute");
  if (!initialized) LEAVE(NOT_INITIALIZED);
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
    case 50: *value = 0; break;                        /* PCI_DOMAIN_ID */
    case 116: *value = 1; break;                       /* GPU_DIRECT_RDMA_SUPPORTED */
    /* DMA_BUF_SUPPORTED: only device 0, so "per device, not device 0 for all" is visible. */
    case 124: *value = device == 0; break;
    default: LEAVE(INVALID_VALUE);
  }
  LEAVE(SUCCESS);
}

/* One attribute of the allocation holding ptr, or its "not CUDA memory" default. Lock held. */
static CUresult pointer_attribute(void *data, int attribute, CUdeviceptr ptr) {
  const struct allocation *a = find_allocation(ptr);
  switch (attribute) {
    case 2: /* MEMORY_TYPE: managed memory reads as device memory, told apart by IS_MANAGED */
      *(unsigned int *)data =
          a == NULL ? 0u : (a->memory == FAKE_CUDA_MEM_MANAGED ? 2u : (unsigned)a->memory);
      break;
    case 7: *(unsigned long long *)data = a == NULL ? 0ull : a->buffer_id; break;
    case 8: *(unsigned int *)data = a != NULL && a->memory == FAKE_CUDA_MEM_MANAGED; break;
    case 9: *(int *)data = a == NULL ? -1 : a->device; break;
    default: return INVALID_VALUE;
  }
  return SUCCESS;
}

EXPORT CUresult cuPointerGetAttributes(unsigned int count, int *attributes, void **data,
                                       CUdeviceptr ptr) {
  ENTER("cuPointerGetAttributes");
  if (!initialized) LEAVE(NOT_INITIALIZED);
  if (attributes == NULL || data == NULL) LEAVE(INVALID_VALUE);
  for (unsigned int i = 0; i < count; ++i) {
    CUresult result = pointer_attribute(data[i], attributes[i], ptr);
    if (result != SUCCESS) LEAVE(result);
  }
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  ENTER("cuMemGetAddressRange_v2");
  if (!initialized) LEAVE(NOT_INITIALIZED);
  const struct allocation *a = find_allocation(ptr);
  if (a == NULL) LEAVE(NOT_FOUND);
  if (base != NULL) *base = a->base;
  if (size != NULL) *size = a->size;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr ptr, size_t size, int type,
                                              unsigned long long flags) {
  ENTER("cuMemGetHandleForAddressRange");
  if (!initialized) LEAVE(NOT_INITIALIZED);
  if (flags & 1ull) {
    struct named_value *pcie =
        find_named(failures, MAX_FAILURES, "cuMemGetHandleForAddressRange:pcie", 0);
    if (pcie != NULL) LEAVE(pcie->value);
  }
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (handle == NULL || type != 1 || size == 0 || (flags & ~1ull) != 0 || ptr % page != 0 ||
      size % page != 0) {
    LEAVE(INVALID_VALUE);
  }
  /* Like the driver: the range must lie in one allocation (whole pages of it). */
  const struct allocation *a = find_allocation(ptr);
  if (a == NULL || a->memory == FAKE_CUDA_MEM_MANAGED ||
      ptr + size > a->base + round_up(a->size, page)) {
    LEAVE(INVALID_VALUE);
  }
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
    case NOT_FOUND: *text = "named symbol not found"; break;
    case 801: *text = "operation not supported"; break;
    default: *text = "fake: unknown error"; return INVALID_VALUE;
  }
  return SUCCESS;
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_cuda_reset(void) {
  pthread_mutex_lock(&lock);
  initialized = 0;
  memset(allocations, 0, sizeof allocations);
  memset(failures, 0, sizeof failures);
  memset(counters, 0, sizeof counters);
  memset(overrides, 0xff, sizeof overrides); /* device -1: unused */
  last_export_ptr = 0;
  last_export_size = 0;
  last_export_flags = 0;
  /* Buffer ids keep growing: ids are never reused, across resets too. */
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_cuda_alloc(int device, size_t size, int memory, unsigned long long *out) {
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) return INVALID_DEVICE;
  if (size == 0 || size > REGION_SIZE || out == NULL) return INVALID_VALUE;
  if (memory != FAKE_CUDA_MEM_DEVICE && memory != FAKE_CUDA_MEM_HOST &&
      memory != FAKE_CUDA_MEM_MANAGED) {
    return INVALID_VALUE;
  }
  pthread_mutex_lock(&lock);
  if (regions[device] == NULL) {
    /* Reserved, never backed: the CPU must never touch device memory. */
    void *region =
        mmap(NULL, REGION_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) LEAVE(OUT_OF_MEMORY);
    regions[device] = region;
  }
  /* First fit from the start of the region, so a freed address is handed out again first. */
  const CUdeviceptr region_start = round_up((uintptr_t)regions[device], GRANULE);
  const CUdeviceptr region_end = (uintptr_t)regions[device] + REGION_SIZE;
  CUdeviceptr candidate = region_start;
  int moved = 1;
  while (moved) {
    moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *a = &allocations[i];
      if (a->live && a->device == device && candidate < a->base + round_up(a->size, GRANULE) &&
          a->base < candidate + round_up(size, GRANULE)) {
        candidate = a->base + round_up(a->size, GRANULE);
        moved = 1;
      }
    }
  }
  if (candidate + size > region_end) LEAVE(OUT_OF_MEMORY);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (!allocations[i].live) {
      allocations[i] = (struct allocation){1, device, memory, candidate, size, next_buffer_id++};
      *out = candidate;
      LEAVE(SUCCESS);
    }
  }
  LEAVE(OUT_OF_MEMORY);
}

EXPORT int fake_cuda_free(unsigned long long ptr) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live && allocations[i].base == ptr) {
      allocations[i].live = 0;
      LEAVE(SUCCESS);
    }
  }
  LEAVE(INVALID_VALUE);
}

EXPORT void fake_cuda_set_failure(const char *name, int code) {
  pthread_mutex_lock(&lock);
  struct named_value *failure = find_named(failures, MAX_FAILURES, name, code != 0);
  if (failure != NULL) {
    failure->value = code;
    if (code == 0) failure->name[0] = '\0';
  }
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_cuda_set_device_attribute(int device, int attribute, int value) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_OVERRIDES; ++i) {
    if (overrides[i].device == -1 ||
        (overrides[i].device == device && overrides[i].attribute == attribute)) {
      overrides[i] = (struct attribute_override){device, attribute, value};
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_cuda_call_count(const char *name) {
  pthread_mutex_lock(&lock);
  const struct named_value *counter = find_named(counters, MAX_COUNTERS, name, 0);
  const int count = counter != NULL ? counter->value : 0;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT void fake_cuda_last_export(unsigned long long *ptr, size_t *size,
                                  unsigned long long *flags) {
  pthread_mutex_lock(&lock);
  *ptr = last_export_ptr;
  *size = last_export_size;
  *flags = last_export_flags;
  pthread_mutex_unlock(&lock);
}

/* Overrides start unused (device -1) even before the first reset. */
__attribute__((constructor)) static void fake_cuda_load(void) {
  memset(overrides, 0xff, sizeof overrides);
}
