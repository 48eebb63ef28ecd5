// regMr / regMrDmaBuf / deregMr: the plugin's whole memory registration, done by hmr.  hmr
// works out what the memory is, exports a dma-buf or registers peer-direct where the NIC can
// take device memory, and caches registrations (so NCCL registering the same buffer again
// costs a lookup) with monitors that drop an entry when its memory
// goes away.  What is left here is bookkeeping: where the buffer is, and how a peer addresses it.
#pragma once

#include <hmr/hmr.h>

#include <cstddef>
#include <cstdint>

#include "../abi/nccl_net_common.h"

namespace hmr::nccl {

class Device;

struct MemoryHandle {
  Device* device = nullptr;
  hmr_mr* mr = nullptr;
  void* desc = nullptr;   // for local buffers (FI_MR_LOCAL providers)
  uint64_t key = 0;       // what a peer's RMA names the registration by
  uintptr_t start = 0;
  size_t size = 0;
  uint64_t rma_base = 0;  // a peer's address of byte `start`: hmr_mr_raw_attr's base
  bool needs_flush = false;  // the NIC writes this memory directly (device memory)
  bool host_memory = false;  // NCCL_PTR_HOST: the CPU can read it

  bool contains(const void* data, size_t len) const {
    const uintptr_t p = reinterpret_cast<uintptr_t>(data);
    return p >= start && len <= size && p - start <= size - len;
  }
  uint64_t rma_address(const void* data) const {
    return rma_base + (reinterpret_cast<uintptr_t>(data) - start);
  }
};

// NCCL_PTR_HOST or NCCL_PTR_CUDA memory; with `dmabuf_fd` >= 0, the range as that dma-buf (at
// `dmabuf_offset`), which hmr registers directly (NCCL closes the fd when this returns).
ncclResult_t register_memory(Device& device, void* data, size_t size, int type, int dmabuf_fd,
                             uint64_t dmabuf_offset, MemoryHandle** out);
// The handle must be alive (checked by the caller).
ncclResult_t deregister_memory(MemoryHandle* handle);

}  // namespace hmr::nccl
