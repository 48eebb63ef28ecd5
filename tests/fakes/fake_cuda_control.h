/* The test-only entry points of the fake CUDA driver (fake_cuda*.c, built as libcuda.so.1).
 *
 * Tests reach them with dlsym on the same library the CUDA iface loaded through
 * HMR_CUDA_LIBRARY, so both see one instance and one state. */
#ifndef HMR_TESTS_FAKE_CUDA_CONTROL_H
#define HMR_TESTS_FAKE_CUDA_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_CUDA_DEVICE_COUNT 2

/* Memory types fake_cuda_alloc can hand out (CUmemorytype values, plus managed). */
enum fake_cuda_memory {
  FAKE_CUDA_MEM_HOST = 1,    /* pinned host memory from the driver */
  FAKE_CUDA_MEM_DEVICE = 2,  /* device-only */
  FAKE_CUDA_MEM_MANAGED = 4, /* migratable */
};

/* Frees every allocation, VMM reservation, mapping and physical allocation; empties the
 * stream-ordered pools (their attributes back to the defaults); forgets host registrations,
 * failures, attribute overrides, counters and primary-context retains; and uninitialises the
 * driver. */
typedef void (*fake_cuda_reset_fn)(void);
/* Hands out `size` bytes on `device` from that device's own reserved address range, owned by no
 * context, in whole 2 MiB granules (cuMemAlloc packs small ones; this does not, so a test may
 * map host memory over a freed range); a freed address is handed out again first.  Device memory stays PROT_NONE to the CPU;
 * host and managed memory is readable and writable, as on a real driver.  Returns a CUresult. */
typedef int (*fake_cuda_alloc_fn)(int device, size_t size, int memory, unsigned long long *out);
/* The same from `device`'s default stream-ordered pool, as cuMemAllocAsync hands memory out
 * (fake_cuda_pool.c): MEMPOOL_HANDLE set, MAPPING_BASE/SIZE the pool's 32 MiB chunk holding
 * the address, a freed address handed out first.  Free with fake_cuda_free, which gives the
 * memory back to the pool, not to the OS. */
typedef int (*fake_cuda_alloc_pooled_fn)(int device, size_t size, unsigned long long *out);
/* Releases every pool's unused chunks, as a synchronisation does under the default release
 * threshold (0): the next allocation at a freed pool address has new physical memory. */
typedef void (*fake_cuda_release_pools_fn)(void);
typedef int (*fake_cuda_free_fn)(unsigned long long ptr);
/* Makes every later call of entry point `name` return `code` (0 clears it).  The pseudo-name
 * "cuMemGetHandleForAddressRange:pcie" fails only calls that pass the PCIe mapping flag. */
typedef void (*fake_cuda_set_failure_fn)(const char *name, int code);
/* Makes only the `nth` call of `name` from now (1: the next) return `code`; the calls before
 * and after it succeed.  For a failure in the middle of one hmr operation: the restore of the
 * caller's context after a copy, the unmap of the second of two VMM segments. */
typedef void (*fake_cuda_set_failure_once_fn)(const char *name, int code, int nth);
/* Overrides cuDeviceGetAttribute(attribute) for one device. */
typedef void (*fake_cuda_set_device_attribute_fn)(int device, int attribute, int value);
/* How often an entry point was called since reset; "*": every entry point together. */
typedef int (*fake_cuda_call_count_fn)(const char *name);
/* The arguments of the last successful cuMemGetHandleForAddressRange. */
typedef void (*fake_cuda_last_export_fn)(unsigned long long *ptr, size_t *size,
                                         unsigned long long *flags);
/* Reads or writes device bytes through the fake's own view of them, so a test can check a copy
 * without trusting the copy in the other direction.  Every byte must be allocated or mapped.
 * Returns a CUresult. */
typedef int (*fake_cuda_peek_fn)(unsigned long long ptr, void *out, size_t len);
typedef int (*fake_cuda_poke_fn)(unsigned long long ptr, const void *in, size_t len);
/* How many cuMemHostRegister ranges are registered now. */
typedef int (*fake_cuda_host_registration_count_fn)(void);
/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS of the allocation at ptr (0 or 1), or -1 for none. */
typedef int (*fake_cuda_sync_memops_fn)(unsigned long long ptr);
/* The primary context's reference count on `device`; releasing the last one frees the memory
 * allocated in it (cuMemAlloc and friends), as a real driver does. */
typedef int (*fake_cuda_primary_retains_fn)(int device);
/* How many VMM reservations, mappings and physical allocations (cuMemCreate, not yet freed) are
 * live now; any pointer may be null. */
typedef void (*fake_cuda_vmm_live_fn)(int *reservations, int *mappings, int *physicals);
/* The device of the calling thread's current context, or -1 when none is current. */
typedef int (*fake_cuda_current_context_device_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
