/* CUDA IPC in the fake driver: cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle,
 * between processes of one machine, following cuda.h's documentation of each:
 *  - cuIpcGetMemHandle "takes a pointer to the base of an existing device memory allocation
 *    created with cuMemAlloc"; anything else (host, managed, VMM, pool memory, an address
 *    inside an allocation) is INVALID_VALUE here, and so is memory this process imported
 *    itself (cuda.h does not say: assumed).  The handle is 64 opaque bytes.
 *  - cuIpcOpenMemHandle maps the exporter's memory into this process at an address of its
 *    own, here with a BUFFER_ID of the importer's own.  cuda.h does not say which id an import
 *    has, but a BUFFER_ID is "guaranteed to be unique within the process" and "IDs are only
 *    unique within a single process": the exporter's id may be one this process already gave
 *    its own memory, so it cannot be the import's (the GPU lane prints what the driver gives:
 *    ImportsFromTwoExportersAtOneAddressNeverShareARegistration).  Flags must be
 *    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1).  "If the memory handle has already been opened by
 *    the current context, the reference count on the handle is incremented by 1 and the
 *    existing device pointer is returned."  The memory is released with cuIpcCloseMemHandle,
 *    once per open; cuMemFree refuses it (fake_cuda_memory.c).
 *  - Opening a handle in the process that exported it fails: users of the real driver report
 *    "invalid device context" (INVALID_CONTEXT); cuda.h does not say.  Assumed here, and the GPU
 *    lane prints what the real driver answers.
 *  - A handle whose allocation the exporter freed (or whose exporter exited): cuda.h calls the
 *    use of such memory undefined; opening it fails here with INVALID_VALUE (assumed).
 * The bytes are shared for real: the first export moves the allocation's bytes into a memfd
 * mapped shared at the same place (the exporter keeps that fd while the allocation lives), and
 * the importer opens it through /proc/<pid>/fd/<fd> and checks it by inode, so a handle whose
 * fd number now names another allocation's memfd is stale, not that allocation. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda_internal.h"

#define HANDLE_MAGIC 0x46414b45u /* "FAKE" */
#define LAZY_ENABLE_PEER_ACCESS 1u

typedef struct {
  char reserved[64];
} CUipcMemHandle;

/* What the 64 bytes carry. */
struct handle_contents {
  unsigned magic;
  int pid;
  int fd;
  int device;
  unsigned long long size;
  unsigned long long inode;
  unsigned long long buffer_id;
};
_Static_assert(sizeof(struct handle_contents) <= sizeof(CUipcMemHandle), "handle too small");

/* Moves an allocation's bytes into a memfd mapped shared at the same alias.  Lock held. */
static CUresult share(struct allocation *a) {
  const size_t span = fake_round_up(a->size, GRANULE);
  const int fd = memfd_create("fake-cuda-ipc", MFD_CLOEXEC);
  if (fd < 0) return OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)span) != 0 || pwrite(fd, a->alias, span, 0) != (ssize_t)span ||
      mmap(a->alias, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    close(fd);
    return OUT_OF_MEMORY;
  }
  a->fd = fd;
  return SUCCESS;
}

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr ptr) {
  ENTER("cuIpcGetMemHandle");
  REQUIRE_CONTEXT();
  if (handle == NULL) LEAVE(INVALID_VALUE);
  struct located at;
  fake_locate(ptr, &at);
  if (at.place != PLACE_ALLOCATION || at.base != ptr) LEAVE(INVALID_VALUE);
  struct allocation *a = &allocations[at.index];
  if (a->memory != FAKE_CUDA_MEM_DEVICE || a->pooled || a->imported) LEAVE(INVALID_VALUE);
  if (a->fd < 0 && share(a) != SUCCESS) LEAVE(OUT_OF_MEMORY);
  struct stat st;
  if (fstat(a->fd, &st) != 0) LEAVE(INVALID_VALUE);
  struct handle_contents contents = {HANDLE_MAGIC, (int)getpid(), a->fd, a->device, a->size,
                                     (unsigned long long)st.st_ino, a->buffer_id};
  memset(handle, 0, sizeof *handle);
  memcpy(handle->reserved, &contents, sizeof contents);
  LEAVE(SUCCESS);
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *out, CUipcMemHandle handle, unsigned int flags) {
  ENTER("cuIpcOpenMemHandle_v2");
  REQUIRE_CONTEXT();
  struct handle_contents contents;
  memcpy(&contents, handle.reserved, sizeof contents);
  if (out == NULL || flags != LAZY_ENABLE_PEER_ACCESS || contents.magic != HANDLE_MAGIC ||
      contents.size == 0) {
    LEAVE(INVALID_VALUE);
  }
  if (contents.pid == (int)getpid()) LEAVE(INVALID_CONTEXT);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) { /* opened before: one more reference */
    struct allocation *a = &allocations[i];
    if (a->live && a->imported && a->import_pid == contents.pid &&
        a->import_buffer_id == contents.buffer_id) {
      ++a->import_opens;
      *out = a->base;
      LEAVE(SUCCESS);
    }
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", contents.pid, contents.fd);
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0) LEAVE(INVALID_VALUE);
  if (fstat(fd, &st) != 0 || (unsigned long long)st.st_ino != contents.inode) {
    close(fd);
    LEAVE(INVALID_VALUE); /* the exporter freed it; the fd number names something else now */
  }
  const size_t span = fake_round_up(contents.size, GRANULE);
  char *alias = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (alias == MAP_FAILED) {
    close(fd);
    LEAVE(OUT_OF_MEMORY);
  }
  const int device = fake_current_device();
  int index = -1;
  const CUresult result = fake_place_allocation(contents.device, contents.size,
                                                FAKE_CUDA_MEM_DEVICE, device, alias, fd, out,
                                                &index);
  if (result != SUCCESS) {
    munmap(alias, span);
    close(fd);
    LEAVE(result);
  }
  struct allocation *a = &allocations[index];
  a->imported = 1;
  a->import_opens = 1;
  a->import_pid = contents.pid;
  a->import_buffer_id = contents.buffer_id;
  LEAVE(SUCCESS);
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  ENTER("cuIpcCloseMemHandle");
  REQUIRE_CONTEXT();
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    struct allocation *a = &allocations[i];
    if (a->live && a->imported && a->base == ptr) {
      if (--a->import_opens == 0) fake_release_allocation(a);
      LEAVE(SUCCESS);
    }
  }
  LEAVE(INVALID_VALUE);
}
