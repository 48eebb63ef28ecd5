/* The fake CUDA driver's primary contexts: one per device, reference counted, current per
 * thread.  As on a real driver, releasing the last reference destroys the context and frees the
 * memory allocated in it, which is why an iface that allocates must keep its retain. */
#include <stddef.h>
#include <string.h>

#include "fake_cuda_internal.h"

struct context {
  int device;
  int retains;
};

static struct context contexts[FAKE_CUDA_DEVICE_COUNT];
/* initial-exec: one pointer in the static TLS block glibc keeps spare for dlopened libraries,
 * read without __tls_get_addr.  With the default (general-dynamic) model the dynamic TLS block
 * made one clang-14 LeakSanitizer run crash at exit on a bogus DTLS range ("Tracer caught
 * signal 11", DTLS of this library's module) in hmr_hmem_api_tests. */
static __thread struct context *current __attribute__((tls_model("initial-exec")));

static int is_context(const struct context *context) {
  return context >= &contexts[0] && context < &contexts[FAKE_CUDA_DEVICE_COUNT];
}

int fake_current_device(void) {
  return current != NULL && current->retains > 0 ? current->device : -1;
}

void fake_reset_contexts(void) {
  for (int i = 0; i < FAKE_CUDA_DEVICE_COUNT; ++i) contexts[i] = (struct context){i, 0};
  current = NULL; /* the resetting thread's; other threads' contexts read as destroyed */
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **context, CUdevice device) {
  ENTER("cuDevicePrimaryCtxRetain");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (context == NULL) LEAVE(INVALID_VALUE);
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  contexts[device].device = device;
  contexts[device].retains++;
  *context = &contexts[device];
  LEAVE(SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) LEAVE(INVALID_DEVICE);
  if (contexts[device].retains == 0) LEAVE(INVALID_CONTEXT);
  if (--contexts[device].retains == 0) fake_free_context_allocations(device);
  LEAVE(SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(void *context) {
  ENTER("cuCtxSetCurrent");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  struct context *wanted = context;
  if (wanted != NULL && (!is_context(wanted) || wanted->retains == 0)) LEAVE(INVALID_CONTEXT);
  current = wanted;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(void **context) {
  ENTER("cuCtxGetCurrent");
  if (!fake_usable()) LEAVE(NOT_INITIALIZED);
  if (context == NULL) LEAVE(INVALID_VALUE);
  *context = current;
  LEAVE(SUCCESS);
}

/* ---- test-only control ------------------------------------------------------------------ */

EXPORT int fake_cuda_primary_retains(int device) {
  if (device < 0 || device >= FAKE_CUDA_DEVICE_COUNT) return -1;
  pthread_mutex_lock(&fake_lock);
  LEAVE(contexts[device].retains);
}

EXPORT int fake_cuda_current_context_device(void) {
  return current != NULL ? current->device : -1;
}

__attribute__((constructor)) static void fake_cuda_contexts_load(void) { fake_reset_contexts(); }
