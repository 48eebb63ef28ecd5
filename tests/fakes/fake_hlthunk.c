/* A fake hl-thunk: a real shared object named libhl-thunk.so with the entry points hmr's
 * SynapseAI iface dlsyms for device memory of its own.
 *
 * Two Gaudi devices, each opened exclusively (an open device, or one another process holds, is
 * passed over; none free is EBUSY), each open a real fd.  Device memory has allocation handles
 * and device VAs from a PROT_NONE range reserved per device: real, distinct addresses the CPU
 * must never touch.  As the driver, it refuses to free a handle that is still mapped.  The
 * mapped-memory dma-buf export returns a real memfd sized to the exported range.
 *
 * The export and unmap follow the habanalabs driver (drivers/accel/habanalabs/common/memory.c)
 * and hl-thunk (src/libhlthunk.c):
 * - hlthunk_device_mapped_memory_export_dmabuf_fd refuses flags other than exactly
 *   O_RDWR | O_CLOEXEC (hl-thunk checks before the ioctl);
 * - export_dmabuf_from_addr finds the mapping by its exact start address
 *   (memhash_node_export_get: an interior address is "not found", EINVAL) and chooses the range
 *   with `offset`: addr, size and offset page-aligned, offset + size within the mapping
 *   (validate_export_params);
 * - the export raises the mapping's export count until the dma-buf is released (its last fd
 *   closed), and unmap_device_va refuses (EINVAL, "memory is exported") while it is raised.
 *   Here an export stays alive while any fd of this process refers to its memfd.
 *
 * Devices have module ids (hw_ip.module_id, what SynapseAI's HLS_MODULE_ID names), distinct
 * from their indexes; hlthunk_open_by_module_id opens the device with that id, as hl-thunk does.
 *
 * Built with FAKE_HLTHUNK_WITH_EXPORT=1 it exports hlthunk_device_mapped_memory_export_dmabuf_fd;
 * without it the symbol is absent, as in libraries before Gaudi2. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_hlthunk_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

#define DEVICE_DONT_CARE 4
#define DEVICE_GAUDI2 5
#define REGION_SIZE (256ull << 20)
#define GRANULE (2ull << 20) /* Gaudi device memory comes in 2 MiB pages */
#define MAX_HANDLES 64
#define MAX_EXPORTS 8

struct device {
  int fd;   /* ours, or -1 when not open here */
  int busy; /* held by another process */
  void *region;
};

struct memory {
  int live;
  int device;
  uint64_t handle;
  uint64_t size;
  uint64_t va; /* 0 while unmapped */
  ino_t exports[MAX_EXPORTS]; /* memfds of its dma-bufs not yet known to be released (0: none) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct device devices[FAKE_HLTHUNK_DEVICE_COUNT] = {{-1, 0, NULL}, {-1, 0, NULL}};
static const char *const bus_ids[FAKE_HLTHUNK_DEVICE_COUNT] = {"0000:33:00.0", "0000:9a:00.0"};
static const uint32_t module_ids[FAKE_HLTHUNK_DEVICE_COUNT] = {FAKE_HLTHUNK_MODULE_ID_0,
                                                               FAKE_HLTHUNK_MODULE_ID_1};
static struct memory memories[MAX_HANDLES];
static uint64_t next_handle = 1;
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;
static uint64_t last_export_address, last_export_size, last_export_offset;
static uint32_t last_export_flags;

static uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

/* The device open as `fd`, or -1. Lock held. */
static int device_of(int fd) {
  for (int i = 0; i < FAKE_HLTHUNK_DEVICE_COUNT; ++i) {
    if (fd >= 0 && devices[i].fd == fd) return i;
  }
  return -1;
}

/* hl-thunk's convention: -errno from int calls, with errno set too. */
#define FAIL(error)              \
  do {                           \
    pthread_mutex_unlock(&lock); \
    errno = (error);             \
    return -(error);             \
  } while (0)
/* ... or -1 with errno set, where hl-thunk passes on a failed open(2). */
#define FAIL_MINUS_ONE(error)    \
  do {                           \
    pthread_mutex_unlock(&lock); \
    errno = (error);             \
    return -1;                   \
  } while (0)
/* ... and 0 from calls that return a handle or an address. */
#define FAIL_ZERO(error)         \
  do {                           \
    pthread_mutex_unlock(&lock); \
    errno = (error);             \
    return 0;                    \
  } while (0)
/* The result is computed before the lock is released: LEAVE(allocate(...)) runs allocate
 * under the lock. */
#define LEAVE(result)                                 \
  do {                                                \
    const __typeof__(result) leave_result = (result); \
    pthread_mutex_unlock(&lock);                      \
    return leave_result;                              \
  } while (0)

/* As hl-thunk-open's libhlthunk.c: with a bus id (hlthunk_open_by_busid) the name is not looked
 * at, an unknown bus id is -EINVAL, and a held device fails its open(2) (exclusive: -1, errno
 * EBUSY); without one (hlthunk_open_device_by_name) the first free device of the named kind,
 * else -1 with errno from the last failed open (EBUSY: every device is held). */
EXPORT int hlthunk_open(int device_name, const char *busid) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_open");
  if (injected != 0) FAIL(injected);
  int held = 0;
  for (int i = 0; i < FAKE_HLTHUNK_DEVICE_COUNT; ++i) {
    if (busid != NULL && strcmp(busid, bus_ids[i]) != 0) continue;
    if (busid == NULL && device_name != DEVICE_DONT_CARE && device_name != DEVICE_GAUDI2) continue;
    if (devices[i].fd >= 0 || devices[i].busy) { /* exclusive */
      held = 1;
      continue;
    }
    const int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    const int error = errno;
    if (fd < 0) FAIL(error);
    devices[i].fd = fd;
    LEAVE(fd);
  }
  if (held) FAIL_MINUS_ONE(EBUSY);
  if (busid != NULL) FAIL(EINVAL);
  FAIL_MINUS_ONE(ENODEV); /* no device of that kind */
}

/* hl-thunk finds the device whose control node reports the module id and opens it by bus id;
 * no such device is -1 (not an -errno). */
EXPORT int hlthunk_open_by_module_id(uint32_t module_id) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_open_by_module_id");
  if (injected != 0) FAIL(injected);
  for (int i = 0; i < FAKE_HLTHUNK_DEVICE_COUNT; ++i) {
    if (module_ids[i] != module_id) continue;
    pthread_mutex_unlock(&lock);
    return hlthunk_open(DEVICE_DONT_CARE, bus_ids[i]);
  }
  pthread_mutex_unlock(&lock);
  errno = ENODEV;
  return -1;
}

EXPORT int hlthunk_close(int fd) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_close");
  if (injected != 0) FAIL(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL(EBADF);
  devices[device].fd = -1;
  /* Closing the device releases everything allocated through it, as the driver does. */
  for (int i = 0; i < MAX_HANDLES; ++i) {
    if (memories[i].live && memories[i].device == device) memories[i].live = 0;
  }
  LEAVE(close(fd));
}

EXPORT uint64_t hlthunk_device_memory_alloc(int fd, uint64_t size, uint64_t page_size,
                                            bool contiguous, bool shared) {
  (void)contiguous;
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_device_memory_alloc");
  if (injected != 0) FAIL_ZERO(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL_ZERO(EBADF);
  if (size == 0 || size > REGION_SIZE || (page_size & (page_size - 1)) != 0 || shared) {
    FAIL_ZERO(EINVAL);
  }
  for (int i = 0; i < MAX_HANDLES; ++i) {
    if (!memories[i].live) {
      memories[i] = (struct memory){1, device, next_handle++, round_up(size, GRANULE), 0, {0}};
      LEAVE(memories[i].handle);
    }
  }
  FAIL_ZERO(ENOMEM);
}

/* The live memory of `device` with `handle`. Lock held. */
static struct memory *find_handle(int device, uint64_t handle) {
  for (int i = 0; i < MAX_HANDLES; ++i) {
    if (memories[i].live && memories[i].device == device && memories[i].handle == handle) {
      return &memories[i];
    }
  }
  return NULL;
}

EXPORT uint64_t hlthunk_device_memory_map(int fd, uint64_t handle, uint64_t hint_addr) {
  (void)hint_addr;
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_device_memory_map");
  if (injected != 0) FAIL_ZERO(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL_ZERO(EBADF);
  struct memory *m = find_handle(device, handle);
  if (m == NULL || m->va != 0) FAIL_ZERO(EINVAL);
  if (devices[device].region == NULL) {
    /* Reserved, never backed: device VAs are not CPU addresses. */
    void *region = fake_reserve_device_range(REGION_SIZE);
    if (region == NULL) FAIL_ZERO(ENOMEM);
    devices[device].region = region;
  }
  /* First fit, so an address freed is handed out again first. */
  const uint64_t region_start = round_up((uintptr_t)devices[device].region, GRANULE);
  const uint64_t region_end = (uintptr_t)devices[device].region + REGION_SIZE;
  uint64_t candidate = region_start;
  int moved = 1;
  while (moved) {
    moved = 0;
    for (int i = 0; i < MAX_HANDLES; ++i) {
      const struct memory *other = &memories[i];
      if (other->live && other->va != 0 && other->device == device &&
          candidate < other->va + other->size && other->va < candidate + m->size) {
        candidate = other->va + other->size;
        moved = 1;
      }
    }
  }
  if (candidate + m->size > region_end) FAIL_ZERO(ENOMEM);
  m->va = candidate;
  LEAVE(candidate);
}

/* Whether a dma-buf exported from `m` is still alive: some fd of this process refers to one of
 * its memfds.  Forgets those that are gone (their dma-buf was released).  Lock held. */
static int exported_now(struct memory *m) {
  int alive[MAX_EXPORTS] = {0};
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) return 0;
  const int own = dirfd(dir);
  for (struct dirent *entry = readdir(dir); entry != NULL; entry = readdir(dir)) {
    const int fd = atoi(entry->d_name);
    struct stat st;
    if (entry->d_name[0] == '.' || fd == own || fstat(fd, &st) != 0) continue;
    for (int i = 0; i < MAX_EXPORTS; ++i) {
      alive[i] |= m->exports[i] != 0 && st.st_ino == m->exports[i];
    }
  }
  closedir(dir);
  int any = 0;
  for (int i = 0; i < MAX_EXPORTS; ++i) {
    if (!alive[i]) m->exports[i] = 0;
    any |= alive[i];
  }
  return any;
}

EXPORT int hlthunk_memory_unmap(int fd, uint64_t device_virt_addr) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_memory_unmap");
  if (injected != 0) FAIL(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL(EBADF);
  for (int i = 0; i < MAX_HANDLES; ++i) {
    struct memory *m = &memories[i];
    if (m->live && m->device == device && m->va != 0 && m->va == device_virt_addr) {
      if (exported_now(m)) FAIL(EINVAL); /* unmap_device_va: "memory is exported" */
      m->va = 0;
      LEAVE(0);
    }
  }
  FAIL(EINVAL);
}

EXPORT int hlthunk_device_memory_free(int fd, uint64_t handle) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_device_memory_free");
  if (injected != 0) FAIL(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL(EBADF);
  struct memory *m = find_handle(device, handle);
  if (m == NULL || m->va != 0) FAIL(EINVAL); /* the driver refuses to free mapped memory */
  m->live = 0;
  LEAVE(0);
}

#if FAKE_HLTHUNK_WITH_EXPORT
EXPORT int hlthunk_device_mapped_memory_export_dmabuf_fd(int fd, uint64_t addr, uint64_t size,
                                                         uint64_t offset, uint32_t flags) {
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_device_mapped_memory_export_dmabuf_fd");
  if (injected != 0) FAIL(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL(EBADF);
  if (flags != (uint32_t)(O_RDWR | O_CLOEXEC)) FAIL(EINVAL); /* hl-thunk's own check */
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (size == 0 || addr % page != 0 || size % page != 0 || offset % page != 0) FAIL(EINVAL);
  struct memory *found = NULL;
  for (int i = 0; i < MAX_HANDLES; ++i) {
    struct memory *m = &memories[i];
    if (m->live && m->device == device && m->va != 0 && m->va == addr) found = m;
  }
  /* Only the exact start of a mapping names it; the range is chosen with the offset. */
  if (found == NULL || offset > found->size || size > found->size - offset) FAIL(EINVAL);
  int slot = -1;
  for (int i = 0; i < MAX_EXPORTS && slot < 0; ++i) {
    if (found->exports[i] == 0) slot = i;
  }
  if (slot < 0) (void)exported_now(found);
  for (int i = 0; i < MAX_EXPORTS && slot < 0; ++i) {
    if (found->exports[i] == 0) slot = i;
  }
  if (slot < 0) FAIL(ENOMEM);
  const int exported = memfd_create("fake-hlthunk-dmabuf", MFD_CLOEXEC);
  const int error = errno;
  if (exported < 0) FAIL(error);
  struct stat st;
  if (ftruncate(exported, (off_t)size) != 0 || fstat(exported, &st) != 0) {
    close(exported);
    FAIL(ENOMEM);
  }
  found->exports[slot] = st.st_ino;
  last_export_address = addr;
  last_export_size = size;
  last_export_offset = offset;
  last_export_flags = flags;
  LEAVE(exported);
}
#endif

/* Test control: while set, a bus id read waits here (outside the lock, so other calls go on),
 * counted in bus_id_reads_waiting: the moment between a device's open and its first use. */
static atomic_int hold_bus_id_reads;
static atomic_int bus_id_reads_waiting;

EXPORT int hlthunk_get_pci_bus_id_from_fd(int fd, char *pci_bus_id, int len) {
  if (atomic_load(&hold_bus_id_reads)) {
    atomic_fetch_add(&bus_id_reads_waiting, 1);
    while (atomic_load(&hold_bus_id_reads)) sched_yield();
    atomic_fetch_sub(&bus_id_reads_waiting, 1);
  }
  pthread_mutex_lock(&lock);
  int injected = fake_calls_enter(&calls, "hlthunk_get_pci_bus_id_from_fd");
  if (injected != 0) FAIL(injected);
  const int device = device_of(fd);
  if (device < 0) FAIL(EBADF);
  if (pci_bus_id == NULL || len < (int)strlen(bus_ids[device]) + 1) FAIL(EINVAL);
  snprintf(pci_bus_id, (size_t)len, "%s", bus_ids[device]);
  LEAVE(0);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_hlthunk_reset(void) {
  atomic_store(&hold_bus_id_reads, 0);
  pthread_mutex_lock(&lock);
  for (int i = 0; i < FAKE_HLTHUNK_DEVICE_COUNT; ++i) {
    if (devices[i].fd >= 0) close(devices[i].fd);
    devices[i].fd = -1;
    devices[i].busy = 0;
  }
  memset(memories, 0, sizeof memories);
  fake_calls_reset(&calls);
  last_export_address = last_export_size = last_export_offset = 0;
  last_export_flags = 0;
  /* Handles keep growing: never reused, across resets too. */
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_hlthunk_set_failure(const char *name, int error) {
  fake_calls_set_failure(&calls, name, error, 0);
}

EXPORT void fake_hlthunk_set_failure_once(const char *name, int error, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, error, nth);
}

EXPORT int fake_hlthunk_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT int fake_hlthunk_open_devices(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < FAKE_HLTHUNK_DEVICE_COUNT; ++i) count += devices[i].fd >= 0;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_hlthunk_live_handles(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_HANDLES; ++i) count += memories[i].live;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_hlthunk_live_mappings(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_HANDLES; ++i) count += memories[i].live && memories[i].va != 0;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT void fake_hlthunk_last_export(uint64_t *address, uint64_t *size, uint64_t *offset,
                                     uint32_t *flags) {
  pthread_mutex_lock(&lock);
  *address = last_export_address;
  *size = last_export_size;
  *offset = last_export_offset;
  *flags = last_export_flags;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_hlthunk_hold_bus_id_reads(int hold) { atomic_store(&hold_bus_id_reads, hold); }

EXPORT int fake_hlthunk_bus_id_reads_waiting(void) { return atomic_load(&bus_id_reads_waiting); }

EXPORT int fake_hlthunk_set_busy(int index, int busy) {
  if (index < 0 || index >= FAKE_HLTHUNK_DEVICE_COUNT) return -EINVAL;
  pthread_mutex_lock(&lock);
  devices[index].busy = busy != 0;
  LEAVE(0);
}
