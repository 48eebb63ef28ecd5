/* A fake SynapseAI runtime: a real shared object named libSynapse.so with the entry points hmr's
 * SynapseAI iface dlsyms (and synDestroy, which hmr must never call: tests count it).
 *
 * Two devices.  Application device memory (fake_synapse_alloc) comes from a PROT_NONE range
 * reserved per device: real, distinct addresses the CPU must never touch.  hcclLookupDMABuff
 * returns a real memfd sized to the looked-up range, so fd ownership is real. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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
};

#define HCCL_FAILURE 1       /* what hcclLookupDMABuff returns when it cannot export */
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

static uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
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

EXPORT synStatus synInitialize(void) {
  ENTER("synInitialize");
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

EXPORT int hcclLookupDMABuff(uint64_t address, uint64_t size, int *fd) {
  if (fd != NULL) *fd = -1;
  ENTER("hcclLookupDMABuff");
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (!initialized || fd == NULL || size == 0 || address % page != 0 || size % page != 0) {
    LEAVE(HCCL_FAILURE);
  }
  const struct allocation *found = NULL;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *a = &allocations[i];
    if (a->live && address >= a->base && address + size <= a->base + a->size) found = a;
  }
  if (found == NULL) LEAVE(HCCL_FAILURE);
  const int exported = memfd_create("fake-hccl-dmabuf", MFD_CLOEXEC);
  if (exported < 0) LEAVE(HCCL_FAILURE);
  if (ftruncate(exported, (off_t)size) != 0) {
    close(exported);
    LEAVE(HCCL_FAILURE);
  }
  *fd = exported;
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
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_synapse_set_failure(const char *name, int code) {
  fake_calls_set_failure(&calls, name, code, 0);
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
  if (regions[device] == NULL) {
    void *region = fake_reserve_device_range(REGION_SIZE);
    if (region == NULL) LEAVE(-1);
    regions[device] = region;
  }
  const uint64_t region_start = round_up((uintptr_t)regions[device], GRANULE);
  const uint64_t region_end = (uintptr_t)regions[device] + REGION_SIZE;
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
