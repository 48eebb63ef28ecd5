/* The test-only entry points of the fake SCAL library (fake_scal.c, built as libscal.so).
 * Tests reach them with dlsym on the library the SynapseAI iface loaded through
 * HMR_SCAL_LIBRARY, so both see one instance and one state. */
#ifndef HMR_TESTS_FAKE_SCAL_CONTROL_H
#define HMR_TESTS_FAKE_SCAL_CONTROL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Forgets every device and failure and every call counted. */
typedef void (*fake_scal_reset_fn)(void);
/* Makes every later call of entry point `name` return `code` (0 clears it). */
typedef void (*fake_scal_set_failure_fn)(const char *name, int code);
/* Makes only the `nth` call of `name` from now (1: the next) return `code`; the calls
 * before and after it succeed. */
typedef void (*fake_scal_set_failure_once_fn)(const char *name, int code, int nth);
typedef int (*fake_scal_call_count_fn)(const char *name);
/* What SynapseAI does when the application acquires a device: SCAL is set up on the device
 * open as `device_fd`, whose "global_hbm" pool is [pool_base, +pool_size) inside the device
 * mapping that starts at mapping_start.  0, or -1 when no slot is left. */
typedef int (*fake_scal_attach_fn)(int device_fd, uint64_t mapping_start, uint64_t pool_base,
                                   uint64_t pool_size);

#ifdef __cplusplus
}
#endif

#endif
