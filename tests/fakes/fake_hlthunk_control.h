/* The test-only entry points of the fake hl-thunk (fake_hlthunk.c, built as libhl-thunk.so).
 * Tests reach them with dlsym on the library the SynapseAI iface loaded through
 * HMR_HLTHUNK_LIBRARY, so both see one instance and one state.  The fake is built twice: with
 * hlthunk_device_mapped_memory_export_dmabuf_fd (fakes/hlthunk, a Gaudi2-era library) and
 * without it (fakes/hlthunk-noexport), so "no mapped export" is a real missing symbol. */
#ifndef HMR_TESTS_FAKE_HLTHUNK_CONTROL_H
#define HMR_TESTS_FAKE_HLTHUNK_CONTROL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_HLTHUNK_DEVICE_COUNT 2
/* The module ids of devices 0 and 1 (what HLS_MODULE_ID names), unlike their indexes. */
#define FAKE_HLTHUNK_MODULE_ID_0 6
#define FAKE_HLTHUNK_MODULE_ID_1 3

/* Forgets every allocation, failure and counter, and closes devices left open. */
typedef void (*fake_hlthunk_reset_fn)(void);
/* Makes every later call of entry point `name` fail with errno `error` (0 clears it): calls
 * that return int return -error, calls that return a handle or address return 0. */
typedef void (*fake_hlthunk_set_failure_fn)(const char *name, int error);
/* Makes only the `nth` call of `name` from now (1: the next) fail with errno `error`; the
 * calls before and after it succeed. */
typedef void (*fake_hlthunk_set_failure_once_fn)(const char *name, int error, int nth);
typedef int (*fake_hlthunk_call_count_fn)(const char *name);
/* Devices open, allocation handles not freed, mappings not unmapped. */
typedef int (*fake_hlthunk_open_devices_fn)(void);
typedef int (*fake_hlthunk_live_handles_fn)(void);
typedef int (*fake_hlthunk_live_mappings_fn)(void);
/* The arguments of the last successful mapped-memory dma-buf export. */
typedef void (*fake_hlthunk_last_export_fn)(uint64_t *address, uint64_t *size, uint64_t *offset,
                                            uint32_t *flags);
/* Marks device `index` as held by another process (busy 1) or free again (busy 0), so
 * hlthunk_open passes it over.  Returns 0, or -EINVAL for a device that does not exist. */
typedef int (*fake_hlthunk_set_busy_fn)(int index, int busy);
/* While `hold` is non-zero, hlthunk_get_pci_bus_id_from_fd waits before it does anything (other
 * calls go on); the count of reads waiting so, for a test to hold a thread between a device's
 * open and its first use. */
typedef void (*fake_hlthunk_hold_bus_id_reads_fn)(int hold);
typedef int (*fake_hlthunk_bus_id_reads_waiting_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
