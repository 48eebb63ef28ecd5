// Owner of one piece of device memory hmr allocated through hl-thunk: the allocation handle and
// its device VA mapping.  Released in the driver's order, unmap then free (the driver refuses to
// free memory that is still mapped), exactly once.
#pragma once

#include <cstdint>

#include "synapseai/hlthunk_symbols.h"
#include "util/status.h"

namespace hmr::synapseai {

class HlthunkMemory {
 public:
  HlthunkMemory() = default;
  // Owns `handle` on device fd `fd` from now on; map() adds the mapping.
  HlthunkMemory(const HlthunkSymbols& symbols, int fd, uint64_t handle)
      : unmap_(symbols.hlthunk_memory_unmap),
        free_(symbols.hlthunk_device_memory_free),
        fd_(fd),
        handle_(handle) {}
  HlthunkMemory(HlthunkMemory&& other) noexcept;
  HlthunkMemory& operator=(HlthunkMemory&& other) noexcept;
  HlthunkMemory(const HlthunkMemory&) = delete;
  HlthunkMemory& operator=(const HlthunkMemory&) = delete;
  ~HlthunkMemory();

  void set_mapping(uint64_t device_va) { va_ = device_va; }
  uint64_t device_va() const { return va_; }

  // Unmaps, then frees; says which step failed and why.  A refused unmap leaves both owned, so
  // the caller can retry: the driver refuses to unmap memory while a dma-buf of it is alive
  // (habanalabs memory.c unmap_device_va: "memory is exported"), which lasts until every fd of
  // the export is closed and every NIC registration of it is gone.  A refused free leaves the
  // handle owned (the mapping is gone): the device memory is still allocated, and only its
  // handle can free it, so release() may be called again.
  Status release();
  bool owns_mapping() const { return va_ != 0; }
  bool owns_handle() const { return handle_ != 0; }

 private:
  int (*unmap_)(int, uint64_t) = nullptr;
  int (*free_)(int, uint64_t) = nullptr;
  int fd_ = -1;
  uint64_t handle_ = 0;
  uint64_t va_ = 0;
};

}  // namespace hmr::synapseai
