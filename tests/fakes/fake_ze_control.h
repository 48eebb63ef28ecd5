/* The test-only entry points of the fake Level Zero loader (fake_ze.c, built as
 * libze_loader.so.1, once with API 1.6 features and once as an API 1.0 loader without
 * zeDevicePciGetPropertiesExt and zeCommandListHostSynchronize).
 *
 * Tests reach them with dlsym on the same library the ZE iface loaded through HMR_ZE_LIBRARY,
 * so both see one instance and one state. */
#ifndef HMR_TESTS_FAKE_ZE_CONTROL_H
#define HMR_TESTS_FAKE_ZE_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Driver 0 has two devices, driver 1 one: hmr's device ids 0x0, 0x1 and 0x10000.  Device 0.1
 * cannot export dma-bufs (only opaque fds); the others can.  Device 0.0 has two tiles
 * (sub-devices).  Driver 1, having one device, serves device allocations of at most
 * FAKE_ZE_POOL_MAX_ALLOC bytes made without an export descriptor from a USM pool of
 * FAKE_ZE_POOL_SIZE bytes, as NEO does: the pool's id for all of them, and the pool's whole
 * buffer as their dma-buf. */
#define FAKE_ZE_POOL_SIZE (2u << 20)
#define FAKE_ZE_POOL_MAX_ALLOC (64u << 10)
#define FAKE_ZE_DRIVER_COUNT 2
#define FAKE_ZE_DEVICE_COUNT 3

/* ze_memory_type_t values fake_ze_alloc hands out. */
enum fake_ze_memory {
  FAKE_ZE_MEM_HOST = 1,
  FAKE_ZE_MEM_DEVICE = 2,
  FAKE_ZE_MEM_SHARED = 3,
};

/* Frees every allocation, context and command list; forgets failures, counters and settings;
 * uninitialises the loader. */
typedef void (*fake_ze_reset_fn)(void);
/* Allocates as the application would in a context of its own on `driver` (any context of that
 * driver then knows the allocation).  Device memory comes from the device's own reserved
 * PROT_NONE range (a CPU touch faults), backed by a memfd the fake reaches through a private
 * mapping; a freed address is handed out again first, with a new allocation id.  `device` is
 * the index within the driver (ignored for host memory).  Returns a ze_result_t. */
typedef int (*fake_ze_alloc_fn)(int driver, int device, size_t size, int memory, void **out);
typedef int (*fake_ze_free_fn)(void *ptr);
/* Copies bytes out through the fake's own view, for checks that do not trust the copy engine. */
typedef int (*fake_ze_read_fn)(const void *ptr, void *out, size_t size);
/* Makes every later call of entry point `name` return `result` (0 clears it).  The pseudo-name
 * "zeMemGetAllocProperties:export" fails only calls that ask for a dma-buf. */
typedef void (*fake_ze_set_failure_fn)(const char *name, int result);
/* Makes only the `nth` call of `name` from now (1: the next) return `result`; the calls
 * before and after it succeed. */
typedef void (*fake_ze_set_failure_once_fn)(const char *name, int result, int nth);
typedef int (*fake_ze_call_count_fn)(const char *name);
/* How many drivers zeDriverGet reports (0..FAKE_ZE_DRIVER_COUNT). */
typedef void (*fake_ze_set_driver_count_fn)(int count);
/* Non-zero: every dma-buf export makes a new fd that the caller must close, as compute-runtime
 * before 22.49 did; 0 (after reset): one fd per buffer, the driver's. */
typedef void (*fake_ze_set_fd_per_export_fn)(int on);
typedef int (*fake_ze_live_contexts_fn)(void);
typedef int (*fake_ze_live_command_lists_fn)(void);
/* The export types the allocation holding ptr was created with (ze_external_memory_export_desc_t
 * chained into its descriptor); -1 when none were declared. */
typedef int (*fake_ze_export_flags_fn)(const void *ptr);
/* Allocates device memory on tile `tile` (0 or 1) of device 0.0, as an application in COMPOSITE
 * hierarchy does: zeMemGetAllocProperties then reports the tile's sub-device handle, which
 * zeDeviceGet does not list. */
typedef int (*fake_ze_alloc_on_tile_fn)(int tile, size_t size, void **out);
/* The dma-buf fd the driver cached for the buffer holding ptr (the pool, for pooled memory);
 * -1 before its first export.  The driver owns it: open until the buffer is freed. */
typedef int (*fake_ze_driver_export_fd_fn)(const void *ptr);
/* The flags of the last zeInit. */
typedef unsigned (*fake_ze_last_init_flags_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
