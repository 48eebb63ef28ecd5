/* A fake SCAL: a real shared object named libscal.so with the three entry points hmr's SynapseAI
 * iface dlsyms to find where the acquired device's "global_hbm" pool lies.
 *
 * As SCAL's own (scal.h; scal_get_handle_from_fd, scal_get_pool_handle_by_name,
 * scal_pool_get_infoV2 as libfabric's fabtests hmem_synapseai.c and UCX's gaudi_base.c call
 * them): a SCAL instance exists only for a device fd SynapseAI set it up on (its acquired
 * device; UCX's comment: the lookup by fd succeeds where synDeviceAcquireByModuleId opened the
 * device), a pool is found only by a name it has, and every null argument is refused with
 * SCAL_INVALID_PARAM.  The pool lies inside a device mapping that may start below the pool
 * (device_base_allocated_address, what the driver names the mapping by, against
 * device_base_address): here it always does, so a caller that exports by the pool's own start
 * is refused by the fake hl-thunk as by the driver. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fake_scal_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

/* scal.h's result codes. */
#define SCAL_SUCCESS 0
#define SCAL_FAILURE -1
#define SCAL_INVALID_PARAM -4
#define SCAL_NOT_FOUND -11
#define MAX_DEVICES 4

/* scal.h: struct scal_memory_pool_infoV2. */
struct scal_memory_pool_info_v2 {
  void *scal;
  const char *name;
  unsigned idx;
  uint64_t device_base_address;
  void *host_base_address;
  uint32_t core_base_address;
  uint64_t totalSize;
  uint64_t freeSize;
  uint64_t device_base_allocated_address;
};

struct scal_device {
  int live;
  int fd;
  uint64_t mapping_start;
  uint64_t pool_base;
  uint64_t pool_size;
  /* Its "global_hbm" pool's handle is this member's address; it points back to the device. */
  struct scal_device *pool_owner;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct scal_device devices[MAX_DEVICES];
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;

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

EXPORT int scal_get_handle_from_fd(int fd, void **scal) {
  ENTER("scal_get_handle_from_fd");
  if (scal == NULL) LEAVE(SCAL_INVALID_PARAM);
  for (int i = 0; i < MAX_DEVICES; ++i) {
    if (devices[i].live && devices[i].fd == fd) {
      *scal = &devices[i];
      LEAVE(SCAL_SUCCESS);
    }
  }
  LEAVE(SCAL_FAILURE); /* no SCAL on this fd: the device was not opened through SynapseAI */
}

EXPORT int scal_get_pool_handle_by_name(void *scal, const char *pool_name, void **pool) {
  ENTER("scal_get_pool_handle_by_name");
  if (scal == NULL || pool_name == NULL || pool == NULL) LEAVE(SCAL_INVALID_PARAM);
  struct scal_device *device = scal;
  if (strcmp(pool_name, "global_hbm") != 0) LEAVE(SCAL_NOT_FOUND);
  *pool = &device->pool_owner;
  LEAVE(SCAL_SUCCESS);
}

EXPORT int scal_pool_get_infoV2(void *pool, struct scal_memory_pool_info_v2 *info) {
  ENTER("scal_pool_get_infoV2");
  if (pool == NULL || info == NULL) LEAVE(SCAL_INVALID_PARAM);
  struct scal_device *device = *(struct scal_device *const *)pool;
  memset(info, 0, sizeof *info);
  info->scal = device;
  info->name = "global_hbm";
  info->device_base_address = device->pool_base;
  info->totalSize = device->pool_size;
  info->freeSize = device->pool_size;
  info->device_base_allocated_address = device->mapping_start;
  LEAVE(SCAL_SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_scal_reset(void) {
  pthread_mutex_lock(&lock);
  memset(devices, 0, sizeof devices);
  fake_calls_reset(&calls);
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_scal_set_failure(const char *name, int code) {
  fake_calls_set_failure(&calls, name, code, 0);
}

EXPORT void fake_scal_set_failure_once(const char *name, int code, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, code, nth);
}

EXPORT int fake_scal_call_count(const char *name) { return fake_calls_count(&calls, name); }

EXPORT int fake_scal_attach(int device_fd, uint64_t mapping_start, uint64_t pool_base,
                            uint64_t pool_size) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_DEVICES; ++i) {
    if (!devices[i].live) {
      devices[i] = (struct scal_device){1, device_fd, mapping_start, pool_base, pool_size, NULL};
      devices[i].pool_owner = &devices[i];
      LEAVE(0);
    }
  }
  LEAVE(-1);
}
