/* The test-only entry points of the fake ROCr runtime (fake_hsa.c, built as
 * libhsa-runtime64.so.1, once as ROCm >= 5.6 and once as a ROCm 5.2 without dma-buf export).
 *
 * Tests reach them with dlsym on the same library the ROCr iface loaded through
 * HMR_ROCR_LIBRARY, so both see one instance and one state. */
#ifndef HMR_TESTS_FAKE_HSA_CONTROL_H
#define HMR_TESTS_FAKE_HSA_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One CPU agent, then this many GPU agents (unless fake_hsa_set_gpu_count hides some). */
#define FAKE_HSA_GPU_COUNT 2
/* Where hsa_amd_memory_lock says the GPU sees pinned memory: the host address with this bit
 * set, so a test can tell which of the two views an answer used. */
#define FAKE_HSA_AGENT_VIEW_BIT (1ull << 47)

/* Frees every allocation (without callbacks) and forgets failures, counters and settings;
 * uninitialises the runtime. */
typedef void (*fake_hsa_reset_fn)(void);
/* Allocates from GPU `gpu`'s VRAM pool, or from the CPU's system pool when gpu is -1, as
 * hsa_amd_memory_pool_allocate would.  VRAM comes from the GPU's own reserved PROT_NONE
 * address range (a CPU touch faults), backed by a memfd the fake reaches through a private
 * mapping; a freed address is handed out again first.  Returns an hsa_status_t. */
typedef int (*fake_hsa_alloc_fn)(int gpu, size_t size, void **out);
/* hsa_amd_memory_pool_free: runs the deallocation callbacks, then frees. */
typedef int (*fake_hsa_free_fn)(void *ptr);
/* Copies device (or host) bytes out through the fake's own view, for checks that do not trust
 * hsa_memory_copy.  Returns an hsa_status_t. */
typedef int (*fake_hsa_read_fn)(const void *ptr, void *out, size_t size);
/* Makes every later call of entry point `name` return `status` (0 clears it). */
typedef void (*fake_hsa_set_failure_fn)(const char *name, int status);
/* Makes only the `nth` call of `name` from now (1: the next) return `status`; the calls before
 * and after it succeed.  For a failure in the middle of one hmr operation (the BDFID query of
 * the second GPU at init, the pool walk of one agent). */
typedef void (*fake_hsa_set_failure_once_fn)(const char *name, int status, int nth);
/* How often an entry point was called since reset. */
typedef int (*fake_hsa_call_count_fn)(const char *name);
/* hsa_init calls not yet balanced by hsa_shut_down. */
typedef int (*fake_hsa_init_count_fn)(void);
/* The next hsa_amd_register_deallocation_callback on the allocation at `ptr` registers, then
 * frees the allocation (running its callbacks, the new one included) before it returns
 * SUCCESS: a free on another thread racing the registration. */
typedef void (*fake_hsa_free_after_next_notifier_fn)(void *ptr);
/* Deallocation callbacks registered and not yet fired or deregistered, over all allocations. */
typedef int (*fake_hsa_notifier_count_fn)(void);
/* How many GPU agents hsa_iterate_agents reports (0..FAKE_HSA_GPU_COUNT). */
typedef void (*fake_hsa_set_gpu_count_fn)(int count);
/* The value of HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED (1 after reset). */
typedef void (*fake_hsa_set_dmabuf_supported_fn)(int supported);
/* The arguments of the last successful hsa_amd_portable_export_dmabuf. */
typedef void (*fake_hsa_last_export_fn)(const void **ptr, size_t *size);
/* Memory of GPU `gpu` as an IPC import (type FAKE_HSA_TYPE_IPC) or a graphics-interop import
 * (FAKE_HSA_TYPE_GRAPHICS) would be: GPU memory the runtime keeps without a region, so no
 * deallocation callback and no dma-buf export (that call would crash the real runtime).
 * fake_hsa_free detaches it.  Returns an hsa_status_t. */
#define FAKE_HSA_TYPE_GRAPHICS 3
#define FAKE_HSA_TYPE_IPC 4
typedef int (*fake_hsa_import_fn)(int gpu, int type, size_t size, void **out);
/* An address reservation with nothing mapped (pointer type RESERVED_ADDR, as ROCm 7 reports
 * hipMallocManaged memory); fake_hsa_free gives it back.  Returns an hsa_status_t. */
typedef int (*fake_hsa_reserve_fn)(size_t size, void **out);
/* Calls since reset that the real runtime would have crashed in (a dma-buf export of imported
 * memory). */
typedef int (*fake_hsa_runtime_crashes_fn)(void);
/* How many agents hsa_amd_agents_allow_access granted the allocation holding ptr (-1: none). */
typedef int (*fake_hsa_allowed_agents_fn)(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif
