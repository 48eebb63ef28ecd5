/* State shared by the files of the fake CUDA driver (fake_cuda*.c, one libcuda.so.1).
 *
 * Memory model.  Device memory lives at addresses the CPU cannot touch: per device a PROT_NONE
 * address range for cuMemAlloc-style allocations (small cuMemAllocs packed into shared 2 MiB
 * chunks, fake_cuda_memory.c), one per device's stream-ordered pool (fake_cuda_pool.c), and a
 * PROT_NONE range per VMM reservation.
 * Its bytes live in a private read-write "alias" mapping only the fake uses, so copies really
 * move data while any CPU access to the device address faults.  Host-allocated and managed
 * memory is CPU-accessible, as on a real driver: its device address range is made read-write
 * and is its own alias. */
#ifndef HMR_TESTS_FAKE_CUDA_INTERNAL_H
#define HMR_TESTS_FAKE_CUDA_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>
#include <stddef.h>
#include <stdint.h>

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
  INVALID_CONTEXT = 201,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
  HOST_MEMORY_ALREADY_REGISTERED = 712,
  HOST_MEMORY_NOT_REGISTERED = 713,
  NOT_SUPPORTED = 801,
};

#define GRANULE (2ull << 20) /* allocation granularity of cuMemAlloc and of VMM */
#define MAX_ALLOCATIONS 128
#define MAX_PHYSICAL 64
#define MAX_RESERVATIONS 16
#define MAX_MAPPINGS 64
#define MAX_REGISTRATIONS 32

/* cuMemAlloc / cuMemHostAlloc / cuMemAllocManaged / fake_cuda_alloc. */
struct allocation {
  int live;
  int device;
  int memory;  /* enum fake_cuda_memory */
  int context; /* the device whose primary context made it; -1 from fake_cuda_alloc */
  CUdeviceptr base;
  size_t size;
  unsigned long long buffer_id;
  char *alias; /* the bytes, GRANULE-rounded */
  int pooled;  /* from the device's stream-ordered pool (cuMemAllocAsync, fake_cuda_pool.c) */
  /* A cuMemAlloc under 2 MiB, placed in a 2 MiB chunk it shares with other small ones, as
   * driver 580 places them (fake_cuda_memory.c). */
  int packed;
  /* Once exported through CUDA IPC (and in the importer), the bytes are a memfd mapped
   * shared at alias, so both processes reach them (fake_cuda_ipc.c); -1 before.  Only then:
   * a real allocation holds no file descriptor of the process, and tests count those. */
  int fd;
  /* cuIpcOpenMemHandle: the exporter's allocation mapped here; closed (not freed) with
   * cuIpcCloseMemHandle once each open is closed. */
  int imported;
  int import_opens;
  int import_pid;
  unsigned long long import_buffer_id; /* the exporter's BUFFER_ID, which names the handle */
  unsigned int sync_memops; /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, set by cuPointerSetAttribute */
};

/* cuMemCreate: physical memory with no address until mapped. */
struct physical {
  int live;
  int released; /* cuMemRelease called; freed when the last mapping goes */
  int device;
  int gpu_direct_rdma;
  size_t size;
  unsigned long long block_id;
  char *alias;
};

struct reservation {
  int live;
  CUdeviceptr base;
  size_t size;
};

struct mapping {
  int live;
  int accessible; /* cuMemSetAccess gave read-write */
  int physical;   /* index into physicals */
  int reservation;
  CUdeviceptr base;
  size_t size;
  size_t offset; /* into the physical memory */
  unsigned long long buffer_id;
};

/* cuMemHostRegister. */
struct registration {
  int live;
  int device;
  uintptr_t base;
  size_t size;
  unsigned long long buffer_id;
};

enum place {
  PLACE_NONE,         /* not CUDA memory */
  PLACE_ALLOCATION,   /* allocations[index] */
  PLACE_MAPPING,      /* mappings[index] */
  PLACE_HOLE,         /* inside reservations[index], nothing mapped */
  PLACE_REGISTRATION, /* registrations[index] */
};

/* What an address is, as every entry point that takes a pointer needs it. */
struct located {
  enum place place;
  int index;
  int device;
  int memory;             /* enum fake_cuda_memory; 0 for none and holes */
  CUdeviceptr base;       /* the allocation, mapping or registration */
  size_t size;
  CUdeviceptr range_base; /* the reservation, or the allocation itself */
  size_t range_size;
  unsigned long long buffer_id;
  unsigned long long block_id;
  char *alias; /* the CPU view of `base`; null where copies are not allowed */
  int pooled;       /* an allocation from a stream-ordered pool */
  CUdeviceptr ptr;  /* the address located */
};

extern pthread_mutex_t fake_lock;
extern int fake_initialized;
extern int fake_forked_child;
/* Initialised, and in the process that initialised it: like the driver, which answers
 * NOT_INITIALIZED to every call in a child forked from a process that used it (driver 580 on
 * an H200: docs/gpu.md).  The child must not call cuInit again either.  Known from a
 * pthread_atfork child handler cuInit installs, as a user-space runtime learns of a fork
 * (libhsakmt's child_fork_handler does the same), not from a getpid() system call per call:
 * the driver answers pointer queries in user space, and a system call in each would make the
 * fake's calls, and hmr's time after them, unlike the real driver's. */
static inline int fake_usable(void) { return fake_initialized && !fake_forked_child; }
extern struct allocation allocations[MAX_ALLOCATIONS];
extern struct physical physicals[MAX_PHYSICAL];
extern struct reservation reservations[MAX_RESERVATIONS];
extern struct mapping mappings[MAX_MAPPINGS];
extern struct registration registrations[MAX_REGISTRATIONS];

/* Counts the call and returns the injected failure for `name`, or SUCCESS.  Lock held. */
CUresult fake_enter(const char *name);
unsigned long long fake_next_id(void); /* buffer and block ids: never reused.  Lock held. */
uint64_t fake_round_up(uint64_t value, uint64_t granule);

/* Lock held for all of these. */
void fake_locate(CUdeviceptr ptr, struct located *out);
/* The device of the calling thread's current, live primary context, or -1. */
int fake_current_device(void);
CUresult fake_allocate(int device, size_t size, int memory, int context, CUdeviceptr *out);
/* Whether [ptr, +size) touches a packed cuMemAlloc and lies inside its 2 MiB chunk. */
int fake_packed_exportable(CUdeviceptr ptr, size_t size);
/* Gives `size` bytes whose bytes are already at `alias` (GRANULE-rounded, with `fd` behind it
 * or -1) an address on `device` and records the allocation; its index in *index. */
CUresult fake_place_allocation(int device, size_t size, int memory, int context, char *alias,
                               int fd, CUdeviceptr *out, int *index);
/* Records an allocation of `size` bytes at `base` whose bytes are at `alias`, with a new
 * BUFFER_ID; its index in *index. */
CUresult fake_record_allocation(int device, CUdeviceptr base, size_t size, int memory,
                                int context, char *alias, int fd, int *index);
void fake_release_allocation(struct allocation *a);
void fake_free_context_allocations(int device);
void fake_reset_memory(void);
/* The stream-ordered pools (fake_cuda_pool.c). */
CUresult fake_pool_allocate(int device, size_t size, int context, CUdeviceptr *out);
void *fake_pool_handle(int device);                                /* MEMPOOL_HANDLE */
unsigned long long fake_pool_block_id(int device, CUdeviceptr ptr); /* its chunk's */
int fake_pool_exportable(CUdeviceptr ptr, size_t size);
void fake_pool_release_unused(int device);
void fake_reset_pools(void);
void fake_reset_vmm(void);
void fake_reset_contexts(void);

#define ENTER(name)                      \
  pthread_mutex_lock(&fake_lock);        \
  CUresult injected = fake_enter(name);  \
  if (injected != SUCCESS) {             \
    pthread_mutex_unlock(&fake_lock);    \
    return injected;                     \
  }

/* The result is computed before the lock is released: LEAVE(allocate(...)) runs allocate
 * under the lock. */
#define LEAVE(result)                                 \
  do {                                                \
    const __typeof__(result) leave_result = (result); \
    pthread_mutex_unlock(&fake_lock);                 \
    return leave_result;                              \
  } while (0)

/* For entry points that need a current context, as the real driver's do. */
#define REQUIRE_CONTEXT()                           \
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);       \
  if (fake_current_device() < 0) LEAVE(INVALID_CONTEXT)

#endif
