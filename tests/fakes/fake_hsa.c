/* A fake ROCr runtime: a real shared object named libhsa-runtime64.so.1 with the HSA entry points
 * hmr's ROCr iface dlsyms, so the real iface code runs without a GPU.
 *
 * One CPU agent and two GPU agents, each with the memory pools a real runtime shows (a
 * kernel-argument and a fine-grained system pool on the CPU; a group-segment and a
 * coarse-grained VRAM pool per GPU).  VRAM lives in a PROT_NONE address range reserved per GPU,
 * so the addresses are real and distinct per GPU and a CPU touch faults; each allocation is a
 * memfd mapped PROT_NONE at its device address and read-write at a private address only the
 * fake uses, so hsa_memory_copy really moves bytes and an exported dma-buf (a dup of that memfd)
 * really holds them.
 *
 * As ROCR-Runtime behaves (runtime.cpp):
 *  - deallocation callbacks exist only for memory-pool allocations: RegisterReleaseNotifier
 *    looks the pointer up in allocation_map_ and answers INVALID_ALLOCATION for imported
 *    memory (an entry without a region) and for anything else, pinned (LOCKED) host memory
 *    included, which is not in that map; so unlocking runs no callback;
 *  - IPC-imported and graphics-interop memory (pointer types IPC, GRAPHICS) is kept with no
 *    region, and hsa_amd_portable_export_dmabuf dereferences the region without a check: the
 *    fake counts such a call as a runtime crash (fake_hsa_runtime_crashes) and fails it;
 *  - an address reservation with nothing mapped (hsa_amd_vmem_address_reserve; what ROCm 7
 *    reports for hipMallocManaged memory) answers RESERVED_ADDR, with the reservation as host
 *    base and size and no owning agent (Runtime::PtrInfo, VMemoryFindReservedAddressHandle);
 *  - after fork() the child has none of the runtime's memory: libhsakmt marks every CPU
 *    mapping of an allocation MADV_DONTFORK (libhsakmt/src/fmm.c: fmm_map_to_cpu for VRAM and
 *    imports, since "libhsakmt: call madvise() from fmm_allocate_device" and "Add
 *    MADV_DONTFORK to device mappings", 2020-2021; fmm_allocate_host_gpu for system memory),
 *    and answers every pointer query UNKNOWN (hsa_amd_pointer_info below).  Here the same
 *    madvise on VRAM and system-pool memory.  libhsakmt maps VRAM MAP_SHARED from the render
 *    node (/dev/dri/renderD*, a character device); the fake maps a memfd MAP_SHARED instead,
 *    which the kernel reports the same way where it matters here: a shared, file-backed mapping
 *    (VM_SHARED, an inode), never private anonymous memory, and gone from a child with
 *    MADV_DONTFORK.  A real device file cannot be opened without the device.
 *
 * Built twice: as ROCm >= 5.6, and with FAKE_HSA_ROCM_5_2 as the ROCm 5.2 that Debian ships,
 * which has no hsa_amd_portable_export_dmabuf and no HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_hsa_control.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

typedef int hsa_status_t;
typedef struct {
  uint64_t handle;
} hsa_agent_t;
typedef struct {
  uint64_t handle;
} hsa_amd_memory_pool_t;
typedef void (*deallocation_callback_t)(void *ptr, void *user_data);

typedef struct {
  uint32_t size;
  int type;
  void *agentBaseAddress;
  void *hostBaseAddress;
  size_t sizeInBytes;
  void *userData;
  hsa_agent_t agentOwner;
  uint32_t global_flags;
} hsa_amd_pointer_info_t;

enum {
  SUCCESS = 0,
  ERROR = 0x1000,
  INVALID_ARGUMENT = 0x1001,
  INVALID_ALLOCATION = 0x1003,
  INVALID_AGENT = 0x1004,
  OUT_OF_RESOURCES = 0x1008,
  NOT_INITIALIZED = 0x100B,
  INVALID_MEMORY_POOL = 40,
};

enum { TYPE_UNKNOWN = 0, TYPE_HSA = 1, TYPE_LOCKED = 2, TYPE_GRAPHICS = 3, TYPE_IPC = 4,
       TYPE_RESERVED_ADDR = 5 };
enum { FINE_GRAINED = 2, KERNARG_INIT = 1, COARSE_GRAINED = 4 };

#define CPU_AGENT 0x1000ull
#define GPU_AGENT(i) (0x2000ull + 0x1000ull * (uint64_t)(i))
#define POOL_MAIN 0x1ull  /* CPU: fine-grained system pool; GPU: coarse-grained VRAM */
#define POOL_OTHER 0x2ull /* CPU: kernel-argument pool; GPU: group segment (no allocation) */

#define REGION_SIZE (256ull << 20) /* address space reserved per GPU */
#define GRANULE (64ull << 10)      /* VRAM allocation granularity */
#define MAX_ALLOCATIONS 128
#define MAX_NOTIFIERS 8

struct notifier {
  void *ptr;
  deallocation_callback_t callback;
  void *user_data;
};

struct allocation {
  int live;
  int type;
  int gpu;             /* -1: owned by the CPU agent */
  uintptr_t base;      /* the address the caller uses (host address for pinned memory) */
  uintptr_t agent_base;
  size_t size;
  size_t mapped;       /* what the fake mapped: size rounded up */
  int memfd;           /* VRAM only, else -1 */
  void *alias;         /* VRAM only: the fake's read-write view */
  int allowed_agents;
  struct notifier notifiers[MAX_NOTIFIERS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static pid_t init_pid; /* the process that first initialised the runtime */
static int gpu_count = FAKE_HSA_GPU_COUNT;
static int dmabuf_supported = 1;
static void *regions[FAKE_HSA_GPU_COUNT];
static struct allocation allocations[MAX_ALLOCATIONS];
static struct fake_calls calls = FAKE_CALLS_INITIALIZER;
static int runtime_crashes; /* calls the real runtime would have crashed in */
static const void *last_export_ptr;
static uintptr_t free_after_next_notifier; /* fake_hsa_free_after_next_notifier */
static size_t last_export_size;

#define ENTER(name)                                       \
  pthread_mutex_lock(&lock);                              \
  hsa_status_t injected = fake_calls_enter(&calls, name); \
  if (injected != SUCCESS) {                              \
    pthread_mutex_unlock(&lock);                          \
    return injected;                                      \
  }

#define ENTER_INITIALIZED(name) \
  ENTER(name);                  \
  if (init_count == 0) LEAVE(NOT_INITIALIZED)

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

static int gpu_of_agent(uint64_t handle) {
  for (int i = 0; i < gpu_count; ++i) {
    if (handle == GPU_AGENT(i)) return i;
  }
  return -1;
}

static int known_agent(uint64_t handle) { return handle == CPU_AGENT || gpu_of_agent(handle) >= 0; }

/* The live allocation holding [ptr, ptr + 1) at the address callers use. Lock held. */
static struct allocation *find_allocation(uintptr_t ptr) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && ptr >= a->base && ptr - a->base < a->size) return a;
  }
  return NULL;
}

static int in_gpu_region(uintptr_t ptr) {
  for (int i = 0; i < FAKE_HSA_GPU_COUNT; ++i) {
    const uintptr_t start = (uintptr_t)regions[i];
    if (regions[i] != NULL && ptr >= start && ptr - start < REGION_SIZE) return 1;
  }
  return 0;
}

static struct allocation *free_slot(void) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (!allocations[i].live) return &allocations[i];
  }
  return NULL;
}

/* Maps a VRAM allocation on `gpu`, first fit from the start of its region. Lock held. */
static hsa_status_t map_vram(int gpu, size_t size, struct allocation *a) {
  if (regions[gpu] == NULL) {
    void *region = fake_reserve_device_range(REGION_SIZE);
    if (region == NULL) return OUT_OF_RESOURCES;
    regions[gpu] = region;
  }
  const size_t mapped = round_up(size, GRANULE);
  const uintptr_t region_start = round_up((uintptr_t)regions[gpu], GRANULE);
  const uintptr_t region_end = (uintptr_t)regions[gpu] + REGION_SIZE;
  uintptr_t candidate = region_start;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      const struct allocation *other = &allocations[i];
      if (other->live && other->gpu == gpu && other->type == TYPE_HSA &&
          candidate < other->base + other->mapped && other->base < candidate + mapped) {
        candidate = other->base + other->mapped;
        moved = 1;
      }
    }
  }
  if (candidate + mapped > region_end) return OUT_OF_RESOURCES;
  const int memfd = memfd_create("fake-hsa-vram", MFD_CLOEXEC);
  if (memfd < 0) return OUT_OF_RESOURCES;
  void *alias = MAP_FAILED;
  if (ftruncate(memfd, (off_t)mapped) != 0 ||
      mmap((void *)candidate, mapped, PROT_NONE, MAP_SHARED | MAP_FIXED, memfd, 0) == MAP_FAILED ||
      (alias = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)) == MAP_FAILED) {
    mmap((void *)candidate, mapped, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    close(memfd);
    return OUT_OF_RESOURCES;
  }
  /* As fmm_map_to_cpu: a forked child must hold no reference to the parent's VRAM. */
  madvise((void *)candidate, mapped, MADV_DONTFORK);
  *a = (struct allocation){1, TYPE_HSA, gpu, candidate, candidate, size, mapped, memfd, alias, -1,
                           {{0}}};
  return SUCCESS;
}

/* Gives an allocation's memory back. Lock held; its notifiers have run. */
static void release(struct allocation *a) {
  if (a->memfd >= 0 && a->gpu >= 0) { /* VRAM, allocated here or imported */
    /* Keep the address reserved (and CPU-inaccessible) for the next allocation. */
    mmap((void *)a->base, a->mapped, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    munmap(a->alias, a->mapped);
    close(a->memfd);
  } else if (a->type == TYPE_HSA || a->type == TYPE_RESERVED_ADDR) {
    munmap((void *)a->base, a->mapped);
  }
  memset(a, 0, sizeof *a);
}

/* Runs the notifiers of `a` without the lock (they may call back in), then releases it.
 * Called with the lock held; returns with it released. */
static void free_and_notify(struct allocation *a) {
  struct notifier notifiers[MAX_NOTIFIERS];
  memcpy(notifiers, a->notifiers, sizeof notifiers);
  memset(a->notifiers, 0, sizeof a->notifiers);
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < MAX_NOTIFIERS; ++i) {
    if (notifiers[i].callback != NULL) notifiers[i].callback(notifiers[i].ptr, notifiers[i].user_data);
  }
  pthread_mutex_lock(&lock);
  release(a);
  pthread_mutex_unlock(&lock);
}

/* Where the fake reads or writes [ptr, ptr + size): VRAM through its alias, anything else in
 * place.  NULL when the range runs out of its allocation or into unallocated VRAM. Lock held. */
static void *resolve(uintptr_t ptr, size_t size) {
  const struct allocation *a = find_allocation(ptr);
  if (a == NULL) return in_gpu_region(ptr) ? NULL : (void *)ptr;
  if (size > a->size - (ptr - a->base)) return NULL;
  if (a->alias == NULL) return (void *)ptr;
  return (char *)a->alias + (ptr - a->base);
}

/* ---- the runtime ------------------------------------------------------------------------- */

EXPORT hsa_status_t hsa_init(void) {
  ENTER("hsa_init");
  if (init_count++ == 0) init_pid = getpid();
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_shut_down(void) {
  ENTER_INITIALIZED("hsa_shut_down");
  init_count--;
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_status_string(hsa_status_t status, const char **text) {
  /* hsa.h: "HSA_STATUS_ERROR_NOT_INITIALIZED The HSA runtime has not been initialized" and
   * INVALID_ARGUMENT for a NULL string or an unknown status: a caller must cope without text. */
  const hsa_status_t injected = fake_calls_enter(&calls, "hsa_status_string");
  if (injected != SUCCESS) return injected;
  if (text == NULL) return INVALID_ARGUMENT;
  switch (status) {
    case SUCCESS: *text = "HSA_STATUS_SUCCESS: The function has been executed successfully."; break;
    case INVALID_ARGUMENT: *text = "HSA_STATUS_ERROR_INVALID_ARGUMENT: fake: invalid argument"; break;
    case INVALID_ALLOCATION: *text = "HSA_STATUS_ERROR_INVALID_ALLOCATION: fake: not one allocation"; break;
    case OUT_OF_RESOURCES: *text = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: fake: out of resources"; break;
    case NOT_INITIALIZED: *text = "HSA_STATUS_ERROR_NOT_INITIALIZED: fake: not initialized"; break;
    default: return INVALID_ARGUMENT;
  }
  return SUCCESS;
}

EXPORT hsa_status_t hsa_system_get_info(int attribute, void *value) {
  ENTER_INITIALIZED("hsa_system_get_info");
  if (value == NULL) LEAVE(INVALID_ARGUMENT);
  switch (attribute) {
    case 0: *(uint16_t *)value = 1; break; /* VERSION_MAJOR */
    case 1: *(uint16_t *)value = 1; break; /* VERSION_MINOR */
#ifdef FAKE_HSA_ROCM_5_2
    case 0x200: *(const char **)value = "fake-rocr-5.2"; break;
#else
    case 0x200: *(const char **)value = "fake-rocr-5.7"; break;
    case 0x204: *(bool *)value = dmabuf_supported != 0; break; /* DMABUF_SUPPORTED */
#endif
    default: LEAVE(INVALID_ARGUMENT);
  }
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void *), void *data) {
  ENTER_INITIALIZED("hsa_iterate_agents");
  if (callback == NULL) LEAVE(INVALID_ARGUMENT);
  const int gpus = gpu_count;
  pthread_mutex_unlock(&lock); /* the callback may call back in */
  hsa_status_t status = callback((hsa_agent_t){CPU_AGENT}, data);
  for (int i = 0; i < gpus && status == SUCCESS; ++i) status = callback((hsa_agent_t){GPU_AGENT(i)}, data);
  return status;
}

EXPORT hsa_status_t hsa_agent_get_info(hsa_agent_t agent, int attribute, void *value) {
  ENTER_INITIALIZED("hsa_agent_get_info");
  if (value == NULL) LEAVE(INVALID_ARGUMENT);
  if (!known_agent(agent.handle)) LEAVE(INVALID_AGENT);
  const int gpu = gpu_of_agent(agent.handle);
  switch (attribute) {
    case 0: /* NAME, char[64] */
      memset(value, 0, 64);
      strcpy((char *)value, gpu < 0 ? "fake-cpu" : gpu == 0 ? "gfx90a-fake0" : "gfx90a-fake1");
      break;
    case 17: *(int *)value = gpu < 0 ? 0 : 1; break; /* DEVICE: CPU 0, GPU 1 */
    case 0xA006: /* BDFID: bus << 8 | device << 3 | function */
      if (gpu < 0) LEAVE(INVALID_ARGUMENT);
      *(uint32_t *)value = gpu == 0 ? 0x2300u : (0xc3u << 8 | 1u << 3);
      break;
    case 0xA00F: /* DOMAIN */
      if (gpu < 0) LEAVE(INVALID_ARGUMENT);
      *(uint32_t *)value = (uint32_t)gpu;
      break;
    default: LEAVE(INVALID_ARGUMENT);
  }
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_amd_agent_iterate_memory_pools(
    hsa_agent_t agent, hsa_status_t (*callback)(hsa_amd_memory_pool_t, void *), void *data) {
  ENTER_INITIALIZED("hsa_amd_agent_iterate_memory_pools");
  if (callback == NULL) LEAVE(INVALID_ARGUMENT);
  if (!known_agent(agent.handle)) LEAVE(INVALID_AGENT);
  pthread_mutex_unlock(&lock);
  /* The pool hmr must skip comes first, so choosing by attributes is what finds the right one. */
  hsa_status_t status = callback((hsa_amd_memory_pool_t){agent.handle | POOL_OTHER}, data);
  if (status == SUCCESS) status = callback((hsa_amd_memory_pool_t){agent.handle | POOL_MAIN}, data);
  return status;
}

EXPORT hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool, int attribute,
                                                 void *value) {
  ENTER_INITIALIZED("hsa_amd_memory_pool_get_info");
  const uint64_t agent = pool.handle & ~0xfull;
  const uint64_t kind = pool.handle & 0xfull;
  if (value == NULL) LEAVE(INVALID_ARGUMENT);
  if (!known_agent(agent) || (kind != POOL_MAIN && kind != POOL_OTHER)) LEAVE(INVALID_MEMORY_POOL);
  const int cpu = agent == CPU_AGENT;
  switch (attribute) {
    case 0: /* SEGMENT: GLOBAL 0, GROUP 3 */
      *(int *)value = (!cpu && kind == POOL_OTHER) ? 3 : 0;
      break;
    case 1: /* GLOBAL_FLAGS */
      *(uint32_t *)value = !cpu ? (kind == POOL_MAIN ? COARSE_GRAINED : 0)
                                : (kind == POOL_MAIN ? FINE_GRAINED : KERNARG_INIT | FINE_GRAINED);
      break;
    case 5: /* RUNTIME_ALLOC_ALLOWED */
      *(bool *)value = cpu || kind == POOL_MAIN;
      break;
    default: LEAVE(INVALID_ARGUMENT);
  }
  LEAVE(SUCCESS);
}

static hsa_status_t pool_allocate(uint64_t pool, size_t size, void **ptr) {
  const uint64_t agent = pool & ~0xfull;
  const uint64_t kind = pool & 0xfull;
  if (!known_agent(agent) || (kind != POOL_MAIN && kind != POOL_OTHER)) return INVALID_MEMORY_POOL;
  if (size == 0 || ptr == NULL) return INVALID_ARGUMENT;
  struct allocation *a = free_slot();
  if (a == NULL) return OUT_OF_RESOURCES;
  const int gpu = gpu_of_agent(agent);
  if (gpu >= 0) {
    if (kind != POOL_MAIN) return INVALID_ARGUMENT; /* the group segment allocates nothing */
    const hsa_status_t status = map_vram(gpu, size, a);
    if (status != SUCCESS) return status;
  } else {
    const size_t mapped = round_up(size, (size_t)sysconf(_SC_PAGESIZE));
    void *memory = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return OUT_OF_RESOURCES;
    /* As fmm_allocate_host_gpu: system memory of the runtime is not copied into a child. */
    madvise(memory, mapped, MADV_DONTFORK);
    *a = (struct allocation){1, TYPE_HSA, -1, (uintptr_t)memory, (uintptr_t)memory, size, mapped,
                             -1, NULL, -1, {{0}}};
  }
  *ptr = (void *)a->base;
  return SUCCESS;
}

EXPORT hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size,
                                                 uint32_t flags, void **ptr) {
  ENTER_INITIALIZED("hsa_amd_memory_pool_allocate");
  if (flags != 0) LEAVE(INVALID_ARGUMENT);
  LEAVE(pool_allocate(pool.handle, size, ptr));
}

EXPORT hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  ENTER_INITIALIZED("hsa_amd_memory_pool_free");
  struct allocation *a = find_allocation((uintptr_t)ptr);
  if (a == NULL || a->type != TYPE_HSA || a->base != (uintptr_t)ptr) LEAVE(INVALID_ALLOCATION);
  free_and_notify(a);
  return SUCCESS;
}

EXPORT hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                                const uint32_t *flags, const void *ptr) {
  ENTER_INITIALIZED("hsa_amd_agents_allow_access");
  if (num_agents == 0 || agents == NULL || flags != NULL || ptr == NULL) LEAVE(INVALID_ARGUMENT);
  for (uint32_t i = 0; i < num_agents; ++i) {
    if (!known_agent(agents[i].handle)) LEAVE(INVALID_AGENT);
  }
  struct allocation *a = find_allocation((uintptr_t)ptr);
  if (a == NULL) LEAVE(INVALID_ARGUMENT);
  a->allowed_agents = (int)num_agents;
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info,
                                         void *(*alloc)(size_t), uint32_t *num_agents_accessible,
                                         hsa_agent_t **accessible) {
  ENTER_INITIALIZED("hsa_amd_pointer_info");
  if (ptr == NULL || info == NULL || info->size < 8) LEAVE(INVALID_ARGUMENT);
  hsa_amd_pointer_info_t answer;
  memset(&answer, 0, sizeof answer);
  /* After fork() the child inherits the runtime's state but not the KFD: libhsakmt refuses a
   * forked child's calls (openclose.c hsaKmtOpenKFD, is_forked_child; CHECK_KFD_OPEN), so
   * ROCr's pointer query, which asks the thunk (hsaKmtQueryPointerInfo), answers UNKNOWN for
   * every address, the parent's GPU memory too, and succeeds. */
  const struct allocation *a = getpid() == init_pid ? find_allocation((uintptr_t)ptr) : NULL;
  if (a != NULL && a->type == TYPE_RESERVED_ADDR) {
    answer.type = a->type;
    answer.hostBaseAddress = (void *)a->base;
    answer.sizeInBytes = a->size;
  } else if (a != NULL) {
    answer.type = a->type;
    answer.agentBaseAddress = (void *)a->agent_base;
    answer.hostBaseAddress = a->gpu >= 0 ? NULL : (void *)a->base;
    answer.sizeInBytes = a->size;
    answer.agentOwner.handle = a->gpu >= 0 ? GPU_AGENT(a->gpu) : CPU_AGENT;
    answer.global_flags = a->gpu >= 0 ? COARSE_GRAINED : FINE_GRAINED;
  }
  /* Like the runtime: fields past the caller's size are left alone, and size says what was filled. */
  answer.size = info->size < sizeof answer ? info->size : (uint32_t)sizeof answer;
  memcpy(info, &answer, answer.size);
  if (alloc != NULL && num_agents_accessible != NULL && accessible != NULL) {
    *num_agents_accessible = 0;
    *accessible = NULL;
    if (a != NULL) {
      hsa_agent_t *list = alloc(sizeof *list);
      if (list == NULL) LEAVE(OUT_OF_RESOURCES);
      list[0] = answer.agentOwner;
      *accessible = list;
      *num_agents_accessible = 1;
    }
  }
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size) {
  ENTER_INITIALIZED("hsa_memory_copy");
  if (size == 0) LEAVE(SUCCESS);
  if (dst == NULL || src == NULL) LEAVE(INVALID_ARGUMENT);
  void *to = resolve((uintptr_t)dst, size);
  void *from = resolve((uintptr_t)src, size);
  if (to == NULL || from == NULL) LEAVE(INVALID_ARGUMENT);
  memmove(to, from, size);
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents,
                                        int num_agents, void **agent_ptr) {
  ENTER_INITIALIZED("hsa_amd_memory_lock");
  if (host_ptr == NULL || size == 0 || agent_ptr == NULL || (agents == NULL) != (num_agents == 0)) {
    LEAVE(INVALID_ARGUMENT);
  }
  const uintptr_t start = (uintptr_t)host_ptr;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    const struct allocation *other = &allocations[i];
    if (other->live && start < other->base + other->size && other->base < start + size) {
      LEAVE(INVALID_ARGUMENT); /* already ROCr memory */
    }
  }
  if (in_gpu_region(start)) LEAVE(INVALID_ARGUMENT);
  struct allocation *a = free_slot();
  if (a == NULL) LEAVE(OUT_OF_RESOURCES);
  *a = (struct allocation){1, TYPE_LOCKED, -1, start, start | FAKE_HSA_AGENT_VIEW_BIT, size, size,
                           -1, NULL, -1, {{0}}};
  *agent_ptr = (void *)a->agent_base;
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_amd_memory_unlock(void *host_ptr) {
  ENTER_INITIALIZED("hsa_amd_memory_unlock");
  struct allocation *a = find_allocation((uintptr_t)host_ptr);
  if (a == NULL || a->type != TYPE_LOCKED || a->base != (uintptr_t)host_ptr) LEAVE(INVALID_ARGUMENT);
  release(a); /* no deallocation callback: pinned memory never had one */
  LEAVE(SUCCESS);
}

EXPORT hsa_status_t hsa_amd_register_deallocation_callback(void *ptr,
                                                           deallocation_callback_t callback,
                                                           void *user_data) {
  ENTER_INITIALIZED("hsa_amd_register_deallocation_callback");
  if (ptr == NULL || callback == NULL) LEAVE(INVALID_ARGUMENT);
  struct allocation *a = find_allocation((uintptr_t)ptr);
  /* Memory-pool allocations only: not imported, pinned or reserved memory. */
  if (a == NULL || a->type != TYPE_HSA) LEAVE(INVALID_ALLOCATION);
  for (int i = 0; i < MAX_NOTIFIERS; ++i) {
    if (a->notifiers[i].callback == NULL) {
      a->notifiers[i] = (struct notifier){ptr, callback, user_data};
      if (free_after_next_notifier != 0 && a->base == free_after_next_notifier) {
        /* Another thread's hsa_amd_memory_pool_free landing between the runtime's registration
         * and this call's return: Runtime::FreeMemory takes the notifiers under its lock and
         * runs them after releasing it (runtime.cpp), so the caller's callback may run before
         * the caller learns its registration succeeded. */
        free_after_next_notifier = 0;
        free_and_notify(a);
        return SUCCESS;
      }
      LEAVE(SUCCESS);
    }
  }
  LEAVE(OUT_OF_RESOURCES);
}

EXPORT void fake_hsa_free_after_next_notifier(void *ptr) {
  pthread_mutex_lock(&lock);
  free_after_next_notifier = (uintptr_t)ptr;
  pthread_mutex_unlock(&lock);
}

EXPORT hsa_status_t hsa_amd_deregister_deallocation_callback(void *ptr,
                                                             deallocation_callback_t callback) {
  ENTER_INITIALIZED("hsa_amd_deregister_deallocation_callback");
  struct allocation *a = find_allocation((uintptr_t)ptr);
  if (a == NULL) LEAVE(INVALID_ARGUMENT);
  /* Like the runtime (Runtime::DeregisterReleaseNotifier walks the allocation's notifier map
   * and erases every entry with this callback, whatever its user data): all of them at once;
   * INVALID_ARGUMENT when there was none. */
  int removed = 0;
  for (int i = 0; i < MAX_NOTIFIERS; ++i) {
    if (a->notifiers[i].ptr == ptr && a->notifiers[i].callback == callback) {
      memset(&a->notifiers[i], 0, sizeof a->notifiers[i]);
      ++removed;
    }
  }
  LEAVE(removed > 0 ? SUCCESS : INVALID_ARGUMENT);
}

#ifndef FAKE_HSA_ROCM_5_2
EXPORT hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf,
                                                   uint64_t *offset) {
  ENTER_INITIALIZED("hsa_amd_portable_export_dmabuf");
  if (ptr == NULL || size == 0 || dmabuf == NULL || offset == NULL) LEAVE(INVALID_ARGUMENT);
  const struct allocation *a = find_allocation((uintptr_t)ptr);
  if (a != NULL && (a->type == TYPE_IPC || a->type == TYPE_GRAPHICS)) {
    runtime_crashes++; /* the runtime reads the missing region: a crash, not an error */
    LEAVE(ERROR);
  }
  /* As Runtime::DmaBufExport (ROCR-Runtime runtime.cpp): memory the runtime allocated
   * (allocation_map_; not pinned host memory or a reserved range) with the whole range inside
   * the allocation, else INVALID_ALLOCATION; then only a GPU's allocation, else INVALID_AGENT
   * (a CPU pool's).  Until an audit against that source the fake answered INVALID_ARGUMENT for
   * all of them. */
  if (a == NULL || a->type != TYPE_HSA) LEAVE(INVALID_ALLOCATION);
  if (size > a->mapped - ((uintptr_t)ptr - a->base)) LEAVE(INVALID_ALLOCATION);
  if (a->gpu < 0 || a->memfd < 0) LEAVE(INVALID_AGENT);
  /* The dma-buf is the whole buffer object; the offset says where ptr lies in it. */
  const int fd = fcntl(a->memfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) LEAVE(OUT_OF_RESOURCES);
  *dmabuf = fd;
  *offset = (uint64_t)((uintptr_t)ptr - a->base);
  last_export_ptr = ptr;
  last_export_size = size;
  LEAVE(SUCCESS);
}
#endif

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT void fake_hsa_reset(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].live) release(&allocations[i]);
  }
  fake_calls_reset(&calls);
  init_count = 0;
  gpu_count = FAKE_HSA_GPU_COUNT;
  dmabuf_supported = 1;
  last_export_ptr = NULL;
  last_export_size = 0;
  runtime_crashes = 0;
  free_after_next_notifier = 0;
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_hsa_alloc(int gpu, size_t size, void **out) {
  if (gpu < -1 || gpu >= FAKE_HSA_GPU_COUNT) return INVALID_AGENT;
  pthread_mutex_lock(&lock);
  const hsa_status_t status = pool_allocate((gpu < 0 ? CPU_AGENT : GPU_AGENT(gpu)) | POOL_MAIN, size, out);
  LEAVE(status);
}

EXPORT int fake_hsa_import(int gpu, int type, size_t size, void **out) {
  if (gpu < 0 || gpu >= FAKE_HSA_GPU_COUNT || (type != TYPE_IPC && type != TYPE_GRAPHICS)) {
    return INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&lock);
  hsa_status_t status = pool_allocate(GPU_AGENT(gpu) | POOL_MAIN, size, out);
  if (status == SUCCESS) find_allocation((uintptr_t)*out)->type = type;
  LEAVE(status);
}

EXPORT int fake_hsa_reserve(size_t size, void **out) {
  pthread_mutex_lock(&lock);
  struct allocation *a = free_slot();
  if (a == NULL || size == 0) LEAVE(INVALID_ARGUMENT);
  void *memory = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) LEAVE(OUT_OF_RESOURCES);
  *a = (struct allocation){1, TYPE_RESERVED_ADDR, -1, (uintptr_t)memory, 0, size, size, -1, NULL,
                           -1, {{0}}};
  *out = memory;
  LEAVE(SUCCESS);
}

EXPORT int fake_hsa_runtime_crashes(void) {
  pthread_mutex_lock(&lock);
  const int count = runtime_crashes;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_hsa_free(void *ptr) {
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation((uintptr_t)ptr);
  if (a == NULL || a->type == TYPE_LOCKED || a->base != (uintptr_t)ptr) LEAVE(INVALID_ALLOCATION);
  free_and_notify(a);
  return SUCCESS;
}

EXPORT int fake_hsa_read(const void *ptr, void *out, size_t size) {
  pthread_mutex_lock(&lock);
  const void *from = find_allocation((uintptr_t)ptr) != NULL ? resolve((uintptr_t)ptr, size) : NULL;
  if (from == NULL || out == NULL) LEAVE(INVALID_ARGUMENT);
  memcpy(out, from, size);
  LEAVE(SUCCESS);
}

EXPORT void fake_hsa_set_failure(const char *name, int status) {
  fake_calls_set_failure(&calls, name, status, 0);
}

EXPORT void fake_hsa_set_failure_once(const char *name, int status, int nth) {
  if (nth > 0) fake_calls_set_failure(&calls, name, status, nth);
}

EXPORT int fake_hsa_call_count(const char *name) {
  return fake_calls_count(&calls, name);
}

EXPORT int fake_hsa_init_count(void) {
  pthread_mutex_lock(&lock);
  const int count = init_count;
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT int fake_hsa_notifier_count(void) {
  pthread_mutex_lock(&lock);
  int count = 0;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    for (int j = 0; allocations[i].live && j < MAX_NOTIFIERS; ++j) {
      count += allocations[i].notifiers[j].callback != NULL;
    }
  }
  pthread_mutex_unlock(&lock);
  return count;
}

EXPORT void fake_hsa_set_gpu_count(int count) {
  pthread_mutex_lock(&lock);
  if (count >= 0 && count <= FAKE_HSA_GPU_COUNT) gpu_count = count;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_hsa_set_dmabuf_supported(int supported) {
  pthread_mutex_lock(&lock);
  dmabuf_supported = supported;
  pthread_mutex_unlock(&lock);
}

EXPORT void fake_hsa_last_export(const void **ptr, size_t *size) {
  pthread_mutex_lock(&lock);
  *ptr = last_export_ptr;
  *size = last_export_size;
  pthread_mutex_unlock(&lock);
}

EXPORT int fake_hsa_allowed_agents(const void *ptr) {
  pthread_mutex_lock(&lock);
  const struct allocation *a = find_allocation((uintptr_t)ptr);
  const int allowed = a != NULL ? a->allowed_agents : -1;
  pthread_mutex_unlock(&lock);
  return allowed;
}
