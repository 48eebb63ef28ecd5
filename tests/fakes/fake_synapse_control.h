/* The test-only entry points of the fake SynapseAI runtime (fake_synapse.c, built as
 * libSynapse.so).  Tests reach them with dlsym on the library the SynapseAI iface loaded through
 * HMR_SYNAPSEAI_LIBRARY, so both see one instance and one state. */
#ifndef HMR_TESTS_FAKE_SYNAPSE_CONTROL_H
#define HMR_TESTS_FAKE_SYNAPSE_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_SYNAPSE_DEVICE_COUNT 2

/* Forgets every allocation, failure and counter; uninitialises the runtime and HCCL (closing
 * HCCL's fd) and releases the acquired device. */
typedef void (*fake_synapse_reset_fn)(void);
/* Makes every later call of entry point `name` return `code` (a synStatus, or for
 * hcclLookupDMABuff its int result; 0 clears it). */
typedef void (*fake_synapse_set_failure_fn)(const char *name, int code);
/* Makes only the `nth` call of `name` from now (1: the next) return `code`; the calls
 * before and after it succeed. */
typedef void (*fake_synapse_set_failure_once_fn)(const char *name, int code, int nth);
typedef int (*fake_synapse_call_count_fn)(const char *name);
/* Device memory as an application gets it from SynapseAI: `size` bytes on `device` from that
 * device's own reserved (PROT_NONE) range.  Returns 0 or -1. */
typedef int (*fake_synapse_alloc_fn)(int device, size_t size, uint64_t *out);
typedef int (*fake_synapse_free_fn)(uint64_t address);
/* The arguments of the last successful hcclLookupDMABuff. */
typedef void (*fake_synapse_last_lookup_fn)(uint64_t *address, uint64_t *size);
/* The application acquires `device` through SynapseAI and initialises HCCL with gaudi-direct:
 * synDeviceGetInfoV2(0) describes it and hcclLookupDMABuff exports its HBM pool.  0 or -1. */
typedef int (*fake_synapse_acquire_fn)(int device);
/* The application acquires `device` as SynapseAI really holds one: `fd` is the device hl-thunk
 * opened, its "global_hbm" pool is [pool_start, +pool_size) (synDeviceGetInfoV2 reports all
 * three), and its allocations come from that pool.  HCCL is not set up: hcclLookupDMABuff
 * aborts, as the real one crashes.  0 or -1. */
typedef int (*fake_synapse_acquire_mapped_fn)(int device, int fd, uint64_t pool_start,
                                              uint64_t pool_size);
/* The gaudi-direct fd HCCL holds (-1 before the first lookup); reset closes it. */
typedef int (*fake_synapse_hccl_fd_fn)(void);
/* Where the HBM pool of `device` starts: HCCL's dma-buf offset 0 for the acquired device. */
typedef uint64_t (*fake_synapse_pool_start_fn)(int device);

#ifdef __cplusplus
}
#endif

#endif
