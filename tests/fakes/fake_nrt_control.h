/* The test-only entry points of the fake Neuron runtime (fake_nrt.c, built as libnrt.so.1).
 *
 * Tests reach them with dlsym on the same library the Neuron iface loaded through
 * HMR_NEURON_LIBRARY, so both see one instance and one state.  The fake is built twice: with
 * nrt_get_dmabuf_fd_v2 (fakes/nrt) and without it (fakes/nrt-v1), so "v2 absent" is a real
 * missing symbol. */
#ifndef HMR_TESTS_FAKE_NRT_CONTROL_H
#define HMR_TESTS_FAKE_NRT_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_NRT_VNC_COUNT 2

/* Forgets every tensor, failure and counter; uninitialises the runtime. */
typedef void (*fake_nrt_reset_fn)(void);
/* Makes every later call of entry point `name` return NRT_STATUS `code` (0 clears it). */
typedef void (*fake_nrt_set_failure_fn)(const char *name, int code);
/* How often an entry point was called since reset. */
typedef int (*fake_nrt_call_count_fn)(const char *name);
/* Tensors allocated and not yet freed. */
typedef int (*fake_nrt_live_tensors_fn)(void);
/* The arguments of the last successful dma-buf export (v1 or v2). */
typedef void (*fake_nrt_last_export_fn)(uint64_t *va, uint64_t *size);
/* Makes nrt_get_dmabuf_fd{,_v2} succeed but hand back fd -1 (1) or behave (0). */
typedef void (*fake_nrt_set_export_gives_no_fd_fn)(int enabled);

#ifdef __cplusplus
}
#endif

#endif
