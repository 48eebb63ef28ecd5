/* A fake SynapseAI runtime: a real shared object named libSynapse.so with the entry points hmr's
 * SynapseAI iface dlsyms (and synDestroy, which hmr must never call: tests count it).
 *
 * Two devices.  Application device memory (fake_synapse_alloc) comes from a PROT_NONE range
 * reserved per device: real, distinct addresses the CPU must never touch.  The range of the
 * device the application acquired (fake_synapse_acquire) is that device's HBM pool.
 *
 * hcclLookupDMABuff behaves as HabanaAI/HCL's (hcl/src/hccl/hccl_wrapper.cpp
 * hcclLookupDMABuff_Wrapper -> hccl_context::hccl_lookup_dma_buff_ctx -> ofi_component_t::
 * getDmabufFd): it ignores address and size and returns the one gaudi-direct dma-buf HCCL
 * exported when it set up its scale-out provider (scaleout_provider.cpp: the whole "global_hbm"
 * pool, starting at the pool's start, hl_ofi_component.cpp initializeMemoryRegion).  The fd is
 * HCCL's (a FileDescriptor member, closed when HCCL tears down): every lookup returns the same
 * number, and a caller that closes it breaks HCCL.  Here it is a memfd sized to the pool, so
 * lseek(SEEK_END) tells its size as a real dma-buf does.  Before HCCL has made its device (no
 * communicator yet) HCL's lookup calls through a device it does not have and the process dies
 * (NIXL's libfabric backend avoids the call for that reason): so does the fake, with abort().
 *
 * A device may be acquired the way SynapseAI really holds one (fake_synapse_acquire_mapped): a
 * device fd hl-thunk opened, whose "global_hbm" pool lies in a mapping of that device, reported
 * by synDeviceGetInfoV2 (fd, globalHbmBaseAddress, dramSize); the application's allocations on
 * it then come from that pool. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_synapse_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

typedef int synStatus;

enum {
  synSuccess = 0,
  synInvalidArgument = 1,
  synOutOfDeviceMemory = 4,
  synUninitialized = 28,
  synAlreadyInitialized = 29,
};

/* What HCL's hcclLookupDMABuff_Wrapper returns: hcclInvalidArgument (7 in hccl_types.h) for a
 * null fd pointer (RETURN_ON_INVALID_FD), and, when HCCL has no dma-buf, the negative "fd"
 * its context gave (-1 here), never a positive failure code. */
#define HCCL_INVALID_ARGUMENT 7
#define HCCL_NO_DMABUF (-1)
#define REGION_SIZE (256ull << 20)
#define GRANULE (2ull << 20) /* Gaudi device memory comes in 2 MiB pages */
#define MAX_ALLOCATIONS 64

struct allocation {
  int live;
  int device;
  uint64_t base;
  uint64_t size;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static void *regions[FAKE_SYNAPSE_DEVICE_COUNT];
static struct allocation allocations[MAX_ALLOCATIONS];
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;
static uint64_t last_lookup_address;
static uint64_t last_lookup_size;
static int acquired = -1; /* the device the application acquired through SynapseAI */
static int hccl_ready;    /* HCCL has made its device and a communicator with gaudi-direct */
static int hccl_fd = -1;  /* HCCL's gaudi-direct dma-buf, exported once and kept */
/* fake_synapse_acquire_mapped: the hl-thunk device fd and the pool it reported (-1: none). */
static int device_fd = -1;
static uint64_t mapped_pool_start, mapped_pool_size;

static uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

/* The HBM pool of `device`: its reserved range, from the first granule boundary. Lock held. */
static int pool_of(int device, uint64_t *start, uint64_t *size) {
  if (device == acquired && device_fd >= 0) {
    *start = mapped_pool_start;
    *size = mapped_pool_size;
    return 0;
  }
  if (regions[device] == NULL) {
    void *region = fake_reserve_device_range(REGION_SIZE);
    if (region == NULL) return -1;
    regions[device] = region;
  }
  *start = round_up((uintptr_t)regions[device], GRANULE);
  *size = (uintptr_t)regions[device] + REGION_SIZE - *start;
  return 0;
}

#define ENTER(name)                              \
  pthread_mutex_lock(&lock);                     \
  int injected = fake_calls_enter(&calls, name); \
  if (injected != 0) {                           \
    pthread_mutex_unlock(&lock);                 \
    return injected;                             \
  }

#define LEAVE(result)            \
  do {                           \
    pthread_mutex_unlock(&lock); \
    return (result);             \
  } while (0)

/* synapse_api.h: "The second invocation of synInitialize does not make any affect and returns
 * synSuccess. if HABANA_DISABLE_DOUBLE_SYN_INITIALIZE environment variable is set then the
 * second invocation of synInitialize returns synAlreadyInitialized."  (A GlobalConf boolean,
 * off by default: "0" or "false" leave it off, as SynapseAI's own double_init_test sets it.) */
static int double_initialize_disabled(void) {
  const char *setting = getenv("HABANA_DISABLE_DOUBLE_SYN_INITIALIZE");
  return setting != NULL && strcmp(setting, "0") != 0 && strcasecmp(setting, "false") != 0;
}

EXPORT synStatus synInitialize(void) {
  ENTER("synInitialize");
  if (initialized && double_initialize_disabled()) LEAVE(synAlreadyInitialized);
  initialized = 1; /* a second call changes nothing, as the real one */
  LEAVE(synSuccess);
}

EXPORT synStatus synDestroy(void) {
  ENTER("synDestroy");
  initialized = 0;
  LEAVE(synSuccess);
}

EXPORT synStatus synDeviceGetCount(uint32_t *count) {
  ENTER("synDeviceGetCount");
  if (!initialized) LEAVE(synUninitialized);
  if (count == NULL) LEAVE(synInvalidArgument);
  *count = FAKE_SYNAPSE_DEVICE_COUNT;
  LEAVE(synSuccess);
}

EXPORT synStatus synDriverGetVersion(char *version, const int len) {
  ENTER("synDriverGetVersion");
  static const char mine[] = "1.19.0-fake";
  if (version == NULL || len < (int)sizeof mine) LEAVE(synInvalidArgument);
  memcpy(version, mine, sizeof mine);
  LEAVE(synSuccess);
}

/* synapse_common_types.h: struct synDeviceInfoV2. */
struct syn_device_info_v2 {
  uint64_t sramBaseAddress;
  uint64_t dramBaseAddress;
  uint32_t sramSize;
  uint64_t dramSize;
  uint64_t tpcEnabledMask;
  uint8_t dramEnabled;
  uint32_t deviceId;
  uint32_t fd;
  int deviceType;
  uint8_t deviceIndex;
  uint64_t globalHbmBaseAddress;
};

/* Device 0 is the device this process acquired (HCL asks for SYN_VALID_DEVICE_ID 0);
 * globalHbmBaseAddress is the start of its HBM pool, where HCCL's dma-buf starts. */
EXPORT synStatus synDeviceGetInfoV2(uint32_t device_id, struct syn_device_info_v2 *info) {
  ENTER("synDeviceGetInfoV2");
  if (!initialized) LEAVE(synUninitialized);
  if (info == NULL || device_id != 0 || acquired < 0) LEAVE(synInvalidArgument);
  uint64_t start = 0;
  uint64_t size = 0;
  if (pool_of(acquired, &start, &size) != 0) LEAVE(synOutOfDeviceMemory);
  memset(info, 0, sizeof *info);
  info->dramBaseAddress = start;
  info->dramSize = size;
  info->dramEnabled = 1;
  info->deviceId = 0;
  info->fd = (uint32_t)device_fd; /* -1 where no hl-thunk device stands behind it */
  info->deviceIndex = (uint8_t)acquired;
  info->globalHbmBaseAddress = start;
  LEAVE(synSuccess);
}

EXPORT int hcclLookupDMABuff(uint64_t address, uint64_t size, int *fd) {
  ENTER("hcclLookupDMABuff");
  /* HCL's RETURN_ON_INVALID_FD: a null fd pointer is refused, anything else is not looked at. */
  if (fd == NULL) LEAVE(HCCL_INVALID_ARGUMENT);
  if (!initialized || acquired < 0 || !hccl_ready) {
    /* HCL: hccl_device()->getOfiComponent() before hccl_device_t::create: a null device. */
    fprintf(stderr, "fake hcclLookupDMABuff: called before HCCL made its device; the real one "
                    "crashes here\n");
    abort();
  }
  if (hccl_fd < 0) {
    uint64_t start = 0;
    uint64_t pool_size = 0;
    if (pool_of(acquired, &start, &pool_size) != 0) LEAVE(HCCL_NO_DMABUF);
    const int exported = memfd_create("fake-hccl-gaudi-direct", MFD_CLOEXEC);
    if (exported < 0) LEAVE(HCCL_NO_DMABUF);
    if (ftruncate(exported, (off_t)pool_size) != 0) {
      close(exported);
      LEAVE(HCCL_NO_DMABUF);
    }
    hccl_fd = exported;
  }
  *fd = hccl_fd;
  last_lookup_address = address;
  last_lookup_size = size;
  LEAVE(0);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_synapse_reset(void) {
  pthread_mutex_lock(&lock);
  initialized = 0;
  memset(allocations, 0, sizeof allocations);
  fake_calls_reset(&calls);
  last_lookup_address = 0;
  last_lookup_size = 0;
  acquired = -1;
  hccl_ready = 0;
  device_fd = -1;
  mapped_pool_start = mapped_pool_size = 0;
  if (hccl_fd >= 0) close(hccl_fd); /* HCCL tears down: its fd goes */
  hccl_fd = -1;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_synapse_set_failure(const char *name, int code) {
  fake_calls_set_failure(&calls, name, code, 0);
}

EXPORT void fake_synapse_set_failure_once(const char *name, int code, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, code, nth);
}

EXPORT int fake_synapse_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT int fake_synapse_alloc(int device, size_t size, uint64_t *out) {
  if (device < 0 || device >= FAKE_SYNAPSE_DEVICE_COUNT || size == 0 || size > REGION_SIZE ||
      out == NULL) {
    return -1;
  }
  pthread_mutex_lock(&lock);
  uint64_t region_start = 0;
  uint64_t region_size = 0;
  if (pool_of(device, &region_start, &region_size) != 0) LEAVE(-1);
  const uint64_t region_end = region_start + region_size;
  const uint64_t rounded = round_up(size, GRANULE);
  uint64_t candidate = region_start;
  int moved = 1;
  while (moved) {
    moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *a = &allocations[i];
      if (a->live && a->device == device && candidate < a->base + a->size &&
          a->base < candidate + rounded) {
        candidate = a->base + a->size;
        moved = 1;
      }
    }
  }
  if (candidate + rounded > region_end) LEAVE(-1);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (!allocations[i].live) {
      allocations[i] = (struct allocation){1, device, candidate, rounded};
      *out = candidate;
      LEAVE(0);
    }
  }
  LEAVE(-1);
}

EXPORT int fake_synapse_free(uint64_t address) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live && allocations[i].base == address) {
      allocations[i].live = 0;
      LEAVE(0);
    }
  }
  LEAVE(-1);
}

EXPORT void fake_synapse_last_lookup(uint64_t *address, uint64_t *size) {
  pthread_mutex_lock(&lock);
  *address = last_lookup_address;
  *size = last_lookup_size;
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_synapse_acquire(int device) {
  if (device < 0 || device >= FAKE_SYNAPSE_DEVICE_COUNT) return -1;
  pthread_mutex_lock(&lock);
  acquired = device;
  hccl_ready = 1;
  device_fd = -1;
  LEAVE(0);
}

EXPORT int fake_synapse_acquire_mapped(int device, int fd, uint64_t pool_start,
                                       uint64_t pool_size) {
  if (device < 0 || device >= FAKE_SYNAPSE_DEVICE_COUNT || fd < 0 || pool_size == 0) return -1;
  pthread_mutex_lock(&lock);
  acquired = device;
  hccl_ready = 0;
  device_fd = fd;
  mapped_pool_start = pool_start;
  mapped_pool_size = pool_size;
  LEAVE(0);
}

EXPORT int fake_synapse_hccl_fd(void) {
  pthread_mutex_lock(&lock);
  const int fd = hccl_fd;
  LEAVE(fd);
}

EXPORT uint64_t fake_synapse_pool_start(int device) {
  if (device < 0 || device >= FAKE_SYNAPSE_DEVICE_COUNT) return 0;
  pthread_mutex_lock(&lock);
  uint64_t start = 0;
  uint64_t size = 0;
  if (pool_of(device, &start, &size) != 0) start = 0;
  LEAVE(start);
}
