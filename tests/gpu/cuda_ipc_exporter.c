/* The other process of the CUDA IPC tests (the GPU lane's and, on the fake driver,
 * tests/hmem_api's): it allocates device memory, exports it with cuIpcGetMemHandle and frees
 * it when told, so the test process can import it as an application imports a peer's
 * buffer.  The driver is libcuda.so.1 found the usual way, or HMR_CUDA_LIBRARY.
 *
 * Commands on stdin, one per line; each answered on stdout with one line:
 *   alloc <bytes> <fill>  cuMemAlloc, every byte set to <fill>, cuIpcGetMemHandle
 *                         -> "handle <128 hex digits> <address in hex>"
 *   selfopen              cuIpcOpenMemHandle of that handle in this, the exporting, process
 *                         -> "selfopen <CUresult>" (what the driver answers; nothing kept open)
 *   free                  cuMemFree of the allocation -> "freed"
 *   quit (or end of input) exits 0.
 * A failed call answers "error <call> <CUresult>" and exits 1. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
  char reserved[64];
} CUipcMemHandle;

static CUresult (*cu_init)(unsigned);
static CUresult (*cu_device_primary_ctx_retain)(void **, int);
static CUresult (*cu_ctx_set_current)(void *);
static CUresult (*cu_mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*cu_mem_free)(CUdeviceptr);
static CUresult (*cu_memcpy_htod)(CUdeviceptr, const void *, size_t);
static CUresult (*cu_ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
static CUresult (*cu_ipc_open_mem_handle)(CUdeviceptr *, CUipcMemHandle, unsigned);
static CUresult (*cu_ipc_close_mem_handle)(CUdeviceptr);

static void check(CUresult result, const char *call) {
  if (result != 0) {
    printf("error %s %d\n", call, result);
    fflush(stdout);
    exit(1);
  }
}

static void *symbol(void *library, const char *name) {
  void *found = dlsym(library, name);
  if (found == NULL) {
    printf("error dlsym:%s -1\n", name);
    exit(1);
  }
  return found;
}

int main(void) {
  const char *path = getenv("HMR_CUDA_LIBRARY");
  void *library = dlopen(path != NULL && path[0] != '\0' ? path : "libcuda.so.1", RTLD_NOW);
  if (library == NULL) {
    printf("error dlopen -1\n");
    return 1;
  }
  *(void **)&cu_init = symbol(library, "cuInit");
  *(void **)&cu_device_primary_ctx_retain = symbol(library, "cuDevicePrimaryCtxRetain");
  *(void **)&cu_ctx_set_current = symbol(library, "cuCtxSetCurrent");
  *(void **)&cu_mem_alloc = symbol(library, "cuMemAlloc_v2");
  *(void **)&cu_mem_free = symbol(library, "cuMemFree_v2");
  *(void **)&cu_memcpy_htod = symbol(library, "cuMemcpyHtoD_v2");
  *(void **)&cu_ipc_get_mem_handle = symbol(library, "cuIpcGetMemHandle");
  *(void **)&cu_ipc_open_mem_handle = symbol(library, "cuIpcOpenMemHandle_v2");
  *(void **)&cu_ipc_close_mem_handle = symbol(library, "cuIpcCloseMemHandle");
  void *context = NULL;
  check(cu_init(0), "cuInit");
  check(cu_device_primary_ctx_retain(&context, 0), "cuDevicePrimaryCtxRetain");
  check(cu_ctx_set_current(context), "cuCtxSetCurrent");

  CUdeviceptr memory = 0;
  CUipcMemHandle handle;
  memset(&handle, 0, sizeof handle);
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long long bytes = 0;
    int fill = 0;
    if (sscanf(line, "alloc %llu %d", &bytes, &fill) == 2) {
      check(cu_mem_alloc(&memory, bytes), "cuMemAlloc_v2");
      char *pattern = malloc(bytes);
      if (pattern == NULL) check(2, "malloc");
      memset(pattern, fill, bytes);
      check(cu_memcpy_htod(memory, pattern, bytes), "cuMemcpyHtoD_v2");
      free(pattern);
      check(cu_ipc_get_mem_handle(&handle, memory), "cuIpcGetMemHandle");
      printf("handle ");
      for (size_t i = 0; i < sizeof handle.reserved; ++i) {
        printf("%02x", (unsigned char)handle.reserved[i]);
      }
      printf(" %llx\n", memory);
    } else if (strncmp(line, "selfopen", 8) == 0) {
      CUdeviceptr opened = 0;
      const CUresult result = cu_ipc_open_mem_handle(&opened, handle, 1);
      if (result == 0) cu_ipc_close_mem_handle(opened);
      printf("selfopen %d\n", result);
    } else if (strncmp(line, "free", 4) == 0) {
      check(cu_mem_free(memory), "cuMemFree_v2");
      memory = 0;
      printf("freed\n");
    } else if (strncmp(line, "quit", 4) == 0) {
      break;
    } else {
      printf("error command -1\n");
      return 1;
    }
    fflush(stdout);
  }
  return 0;
}
