/* A fake AWS Neuron runtime: a real shared object named libnrt.so.1 with the nrt entry points
 * hmr's Neuron iface dlsyms, so the real iface code runs without a Neuron device.
 *
 * Two visible NeuronCores (vnc).  Device tensors get VAs from a PROT_NONE address range
 * reserved per vnc: the addresses are real and distinct per vnc, and a CPU touch would fault.
 * Each tensor's bytes live in a host shadow buffer that nrt_tensor_write/read and
 * nrt_memcpy_to_device really move data through.  dma-buf export returns a memfd holding a
 * snapshot of the exported object's bytes, so both fd ownership and offsets are checkable: the
 * byte at (fd, offset) must be the byte at the exported VA.
 *
 * Built with FAKE_NRT_WITH_V2=1 it also exports nrt_get_dmabuf_fd_v2; without it the symbol is
 * absent, as in runtimes before it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_nrt_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

typedef int NRT_STATUS;

enum {
  SUCCESS = 0,
  FAILURE = 1,
  INVALID = 2,
  INVALID_HANDLE = 3,
  RESOURCE = 4,
  UNINITIALIZED = 13,
};

#define REGION_SIZE (256ull << 20) /* address space reserved per vnc */
#define GRANULE 4096ull
#define MAX_TENSORS 128

struct nrt_tensor {
  int live;
  int vnc;
  uint64_t va;
  size_t size;
  unsigned char *shadow; /* the tensor's bytes, where the "device" keeps them */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static void *regions[FAKE_NRT_VNC_COUNT];
static struct nrt_tensor tensors[MAX_TENSORS];
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;
static uint64_t last_export_va;
static uint64_t last_export_size;
static int export_gives_no_fd;

/* The live tensor holding `va`. Lock held. */
static struct nrt_tensor *find_tensor(uint64_t va) {
  for (int i = 0; i < MAX_TENSORS; ++i) {
    struct nrt_tensor *t = &tensors[i];
    if (t->live && va >= t->va && va < t->va + t->size) return t;
  }
  return NULL;
}

static int is_live(const struct nrt_tensor *t) {
  return t != NULL && t >= tensors && t < tensors + MAX_TENSORS && t->live;
}

static uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

#define ENTER(name)                                     \
  pthread_mutex_lock(&lock);                            \
  NRT_STATUS injected = fake_calls_enter(&calls, name); \
  if (injected != SUCCESS) {                            \
    pthread_mutex_unlock(&lock);                        \
    return injected;                                    \
  }

#define LEAVE(result)            \
  do {                           \
    pthread_mutex_unlock(&lock); \
    return (result);             \
  } while (0)

/* The real nrt_init opens the visible NeuronCores for this process, and a NeuronCore serves one
 * process at a time (aws-neuron-sdk: nrt.h, NEURON_RT_VISIBLE_CORES), so a library that called
 * it would take cores from the application.  Tests read call_count("nrt_init") to prove hmr
 * never does; allocations still need it, made by the test as the application. */
EXPORT NRT_STATUS nrt_init(int framework, const char *fw_version, const char *fal_version) {
  ENTER("nrt_init");
  if (framework != 1 /* NO_FW */ || fw_version == NULL || fal_version == NULL) LEAVE(INVALID);
  initialized = 1;
  LEAVE(SUCCESS);
}

EXPORT NRT_STATUS nrt_get_visible_vnc_count(uint32_t *count) {
  ENTER("nrt_get_visible_vnc_count");
  if (count == NULL) LEAVE(INVALID);
  *count = FAKE_NRT_VNC_COUNT; /* callable before nrt_init, as the real one */
  LEAVE(SUCCESS);
}

EXPORT NRT_STATUS nrt_tensor_allocate(int placement, int vnc, size_t size, const char *name,
                                      struct nrt_tensor **out) {
  ENTER("nrt_tensor_allocate");
  if (!initialized) LEAVE(UNINITIALIZED);
  if (placement != 0 /* DEVICE */ || vnc < 0 || vnc >= FAKE_NRT_VNC_COUNT || size == 0 ||
      size > REGION_SIZE || name == NULL || out == NULL) {
    LEAVE(INVALID);
  }
  if (regions[vnc] == NULL) {
    /* Reserved, never backed: the CPU must never touch device memory. */
    void *region = fake_reserve_device_range(REGION_SIZE);
    if (region == NULL) LEAVE(RESOURCE);
    regions[vnc] = region;
  }
  /* First fit from the start of the region, so a freed address is handed out again first. */
  const uint64_t region_start = round_up((uintptr_t)regions[vnc], GRANULE);
  const uint64_t region_end = (uintptr_t)regions[vnc] + REGION_SIZE;
  const uint64_t rounded = round_up(size, GRANULE);
  uint64_t candidate = region_start;
  int moved = 1;
  while (moved) {
    moved = 0;
    for (int i = 0; i < MAX_TENSORS; ++i) {
      const struct nrt_tensor *t = &tensors[i];
      if (t->live && t->vnc == vnc && candidate < t->va + round_up(t->size, GRANULE) &&
          t->va < candidate + rounded) {
        candidate = t->va + round_up(t->size, GRANULE);
        moved = 1;
      }
    }
  }
  if (candidate + rounded > region_end) LEAVE(RESOURCE);
  for (int i = 0; i < MAX_TENSORS; ++i) {
    if (!tensors[i].live) {
      unsigned char *shadow = calloc(1, size);
      if (shadow == NULL) LEAVE(RESOURCE);
      tensors[i] = (struct nrt_tensor){1, vnc, candidate, size, shadow};
      *out = &tensors[i];
      LEAVE(SUCCESS);
    }
  }
  LEAVE(RESOURCE);
}

EXPORT void nrt_tensor_free(struct nrt_tensor **tensor) {
  pthread_mutex_lock(&lock);
  (void)fake_calls_enter(&calls, "nrt_tensor_free");
  if (tensor != NULL && is_live(*tensor)) {
    free((*tensor)->shadow);
    memset(*tensor, 0, sizeof **tensor);
    *tensor = NULL;
  }
  pthread_mutex_unlock(&lock);
}

EXPORT void *nrt_tensor_get_va(const struct nrt_tensor *tensor) {
  pthread_mutex_lock(&lock);
  void *va = NULL;
  if (fake_calls_enter(&calls, "nrt_tensor_get_va") == SUCCESS && is_live(tensor)) {
    va = (void *)(uintptr_t)tensor->va;
  }
  pthread_mutex_unlock(&lock);
  return va;
}

EXPORT NRT_STATUS nrt_tensor_read(const struct nrt_tensor *tensor, void *buf, size_t offset,
                                  size_t size) {
  ENTER("nrt_tensor_read");
  if (!is_live(tensor)) LEAVE(INVALID_HANDLE);
  if (buf == NULL || offset > tensor->size || size > tensor->size - offset) LEAVE(INVALID);
  memcpy(buf, tensor->shadow + offset, size);
  LEAVE(SUCCESS);
}

EXPORT NRT_STATUS nrt_tensor_write(struct nrt_tensor *tensor, const void *buf, size_t offset,
                                   size_t size) {
  ENTER("nrt_tensor_write");
  if (!is_live(tensor)) LEAVE(INVALID_HANDLE);
  if (buf == NULL || offset > tensor->size || size > tensor->size - offset) LEAVE(INVALID);
  memcpy(tensor->shadow + offset, buf, size);
  LEAVE(SUCCESS);
}

EXPORT NRT_STATUS nrt_memcpy_to_device(void *dest, const void *src, size_t size) {
  ENTER("nrt_memcpy_to_device");
  if (!initialized) LEAVE(UNINITIALIZED);
  struct nrt_tensor *t = find_tensor((uintptr_t)dest);
  if (t == NULL || src == NULL || (uintptr_t)dest + size > t->va + t->size) LEAVE(INVALID);
  memcpy(t->shadow + ((uintptr_t)dest - t->va), src, size);
  LEAVE(SUCCESS);
}

/* A memfd of `length` bytes holding the tensor's bytes from `from` on (zero past its end).
 * Returns the fd or -1. Lock held. */
static int snapshot_fd(const struct nrt_tensor *t, uint64_t from, uint64_t length) {
  int fd = memfd_create("fake-nrt-dmabuf", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)length) != 0) {
    close(fd);
    return -1;
  }
  const uint64_t start = from - t->va;
  const uint64_t available = start < t->size ? t->size - start : 0;
  const uint64_t count = available < length ? available : length;
  if (count > 0 && pwrite(fd, t->shadow + start, count, 0) != (ssize_t)count) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Lock held.  The whole tensor is one dma-buf object; exports need whole 4 KiB pages. */
static NRT_STATUS check_export(uint64_t va, uint64_t size, int *fd, struct nrt_tensor **out) {
  if (!initialized) return UNINITIALIZED;
  if (fd == NULL || size == 0 || va % GRANULE != 0 || size % GRANULE != 0) return INVALID;
  struct nrt_tensor *t = find_tensor(va);
  if (t == NULL || va + size > t->va + round_up(t->size, GRANULE)) return INVALID;
  *out = t;
  return SUCCESS;
}

/* v1: only from the start of the dma-buf object (the tensor); the fd starts at `va`. */
EXPORT NRT_STATUS nrt_get_dmabuf_fd(uint64_t va, uint64_t size, int *fd) {
  ENTER("nrt_get_dmabuf_fd");
  struct nrt_tensor *t = NULL;
  NRT_STATUS status = check_export(va, size, fd, &t);
  if (status != SUCCESS) LEAVE(status);
  if (va != t->va) LEAVE(INVALID);
  if (export_gives_no_fd) {
    *fd = -1;
    LEAVE(SUCCESS);
  }
  *fd = snapshot_fd(t, va, size);
  if (*fd < 0) LEAVE(RESOURCE);
  last_export_va = va;
  last_export_size = size;
  LEAVE(SUCCESS);
}

#if FAKE_NRT_WITH_V2
/* v2: from any VA inside the object; the fd covers the whole tensor and `offset` says where
 * `va` lies in it. */
EXPORT NRT_STATUS nrt_get_dmabuf_fd_v2(uint64_t va, uint64_t size, int *fd, uint64_t *offset) {
  ENTER("nrt_get_dmabuf_fd_v2");
  struct nrt_tensor *t = NULL;
  NRT_STATUS status = check_export(va, size, fd, &t);
  if (status != SUCCESS) LEAVE(status);
  if (offset == NULL) LEAVE(INVALID);
  if (export_gives_no_fd) {
    *fd = -1;
    LEAVE(SUCCESS);
  }
  *fd = snapshot_fd(t, t->va, round_up(t->size, GRANULE));
  if (*fd < 0) LEAVE(RESOURCE);
  *offset = va - t->va;
  last_export_va = va;
  last_export_size = size;
  LEAVE(SUCCESS);
}
#endif

EXPORT const char *nrt_get_status_as_str(NRT_STATUS status) {
  switch (status) {
    case SUCCESS: return "success";
    case FAILURE: return "fake: generic failure";
    case INVALID: return "fake: invalid argument";
    case INVALID_HANDLE: return "fake: invalid handle";
    case RESOURCE: return "fake: out of resources";
    case UNINITIALIZED: return "fake: runtime not initialized";
    default: return NULL;
  }
}

struct fake_nrt_version {
  uint64_t rt_major, rt_minor, rt_patch, rt_maintenance;
  char rt_detail[128];
  char git_hash[64];
};

EXPORT NRT_STATUS nrt_get_version(struct fake_nrt_version *version, size_t size) {
  ENTER("nrt_get_version");
  if (version == NULL || size < 4 * sizeof(uint64_t)) LEAVE(INVALID);
  const struct fake_nrt_version mine = {2, 21, 7, 0, "fake", "0"};
  memcpy(version, &mine, size < sizeof mine ? size : sizeof mine);
  LEAVE(SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_nrt_reset(void) {
  pthread_mutex_lock(&lock);
  initialized = 0;
  for (int i = 0; i < MAX_TENSORS; ++i) free(tensors[i].shadow);
  memset(tensors, 0, sizeof tensors);
  fake_calls_reset(&calls);
  last_export_va = 0;
  last_export_size = 0;
  export_gives_no_fd = 0;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_nrt_set_failure(const char *name, int code) {
  fake_calls_set_failure(&calls, name, code, 0);
}

EXPORT int fake_nrt_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT int fake_nrt_live_tensors(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_TENSORS; ++i) count += tensors[i].live;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT void fake_nrt_last_export(uint64_t *va, uint64_t *size) {
  pthread_mutex_lock(&lock);
  *va = last_export_va;
  *size = last_export_size;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_nrt_set_export_gives_no_fd(int enabled) {
  pthread_mutex_lock(&lock);
  export_gives_no_fd = enabled;
  pthread_mutex_unlock(&lock);
}
