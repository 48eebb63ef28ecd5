#include "memory_handle.h"

#include <memory>

#include "device.h"
#include "log.h"

namespace hmr::nccl {
namespace {

// One access set for every registration, so any two registrations of a buffer can share hmr's
// cached NIC registration.
constexpr uint64_t kAccess =
    HMR_SEND | HMR_RECV | HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;

ncclResult_t hmr_failed(const char* call, int rc, const void* data, size_t size) {
  return fail(ncclSystemError, "%s of %zu bytes at %p failed: %s (%s)", call, size, data,
              hmr_strerror(rc), hmr_last_error());
}

}  // namespace

ncclResult_t register_memory(Device& device, void* data, size_t size, int type, int dmabuf_fd,
                             uint64_t dmabuf_offset, MemoryHandle** out) {
  if (data == nullptr || size == 0) {
    return fail(ncclInvalidArgument, "regMr of %zu bytes at %p: nothing to register", size, data);
  }
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    return fail(ncclInvalidArgument, "regMr of %p: memory type %d is neither NCCL_PTR_HOST nor "
                "NCCL_PTR_CUDA", data, type);
  }
  hmr_mr_attr attr{};
  attr.size = sizeof attr;
  attr.access = kAccess;
  iovec iov{data, size};
  hmr_mr_dmabuf dmabuf{dmabuf_fd, dmabuf_offset, size, data};
  uint64_t flags = 0;
  if (type == NCCL_PTR_CUDA) {
    // NCCL says GPU memory: declare it, so hmr verifies instead of asking every runtime.
    hmr_mem_attr memory{};
    memory.size = sizeof memory;
    if (const int rc = hmr_mem_query(data, size, &memory); rc != 0) {
      return hmr_failed("hmr_mem_query of NCCL_PTR_CUDA memory", rc, data, size);
    }
    if (memory.iface != HMR_HMEM_CUDA) {
      return fail(ncclInvalidArgument, "regMr of %p: NCCL says CUDA memory, hmr finds memory of "
                  "iface %d", data, static_cast<int>(memory.iface));
    }
    attr.iface = HMR_HMEM_CUDA;
    attr.device.cuda = static_cast<int>(memory.device);
  }
  if (dmabuf_fd >= 0 && type == NCCL_PTR_CUDA) {
    attr.dmabuf = &dmabuf;
    flags |= HMR_MR_DMABUF;
  } else {
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    // Peers address this handle from the base hmr reports (below), so a sub-range of a
    // registered buffer (NCCL's user buffers) is a cache hit on offset-addressed providers too.
    flags |= HMR_MR_REPORTED_BASE;
  }
  auto handle = std::make_unique<MemoryHandle>();
  if (const int rc = hmr_mr_regattr(device.registrations(), &attr, flags, &handle->mr); rc != 0) {
    return hmr_failed(flags & HMR_MR_DMABUF ? "hmr_mr_regattr (dma-buf)" : "hmr_mr_regattr", rc,
                      data, size);
  }
  hmr_mr_info info{};
  info.size = sizeof info;
  if (const int rc = hmr_mr_query(handle->mr, &info); rc != 0) {
    hmr_mr_close(handle->mr);
    return hmr_failed("hmr_mr_query", rc, data, size);
  }
  handle->device = &device;
  handle->desc = hmr_mr_desc(handle->mr);
  handle->key = hmr_mr_key(handle->mr);
  handle->start = reinterpret_cast<uintptr_t>(data);
  handle->size = size;
  // What a peer uses as the address of the handle's first byte: its VA, or (offset addressing)
  // its offset in the NIC registration it shares.
  uint8_t key_bytes[64];
  size_t key_size = sizeof key_bytes;
  if (const int rc = hmr_mr_raw_attr(handle->mr, &handle->rma_base, key_bytes, &key_size, 0);
      rc != 0) {
    hmr_mr_close(handle->mr);
    return hmr_failed("hmr_mr_raw_attr", rc, data, size);
  }
  handle->needs_flush = info.path == HMR_MR_PATH_DMABUF || info.path == HMR_MR_PATH_PEER_DIRECT ||
                        info.path == HMR_MR_PATH_CALLER_DMABUF;
  handle->host_memory = type == NCCL_PTR_HOST;
  *out = handle.release();
  return ncclSuccess;
}

ncclResult_t deregister_memory(MemoryHandle* handle) {
  const int rc = hmr_mr_close(handle->mr);
  const uintptr_t start = handle->start;
  const size_t size = handle->size;
  delete handle;
  if (rc != 0) {
    return hmr_failed("hmr_mr_close", rc, reinterpret_cast<const void*>(start), size);
  }
  return ncclSuccess;
}

}  // namespace hmr::nccl
