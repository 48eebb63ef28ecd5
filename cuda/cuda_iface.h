// The CUDA memory interface, on the driver API (libcuda.so.1), dlopen'ed at init.
//
// Driver API rather than runtime API: it is the library every CUDA machine has, and it is what
// the NIC-facing calls (dma-buf) live in.  Queries use cuPointerGetAttributes alone, which
// needs no context; the real driver refuses cuMemGetAddressRange and
// cuMemGetHandleForAddressRange with CUDA_ERROR_INVALID_CONTEXT on a thread with no current
// context (an H100, driver 580: docs/gpu.md), so exports, and queries on a driver without the
// mapping attributes, borrow one when the caller's thread has none.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_context.h"
#include "cuda/cuda_symbols.h"
#include "hmem/iface.h"
#include "hmem/symbol_table.h"

namespace hmr::cuda {

inline constexpr const char* kCudaDefaultLibrary = "libcuda.so.1";  // HMR_CUDA_LIBRARY overrides

class CudaIface final : public hmem::Iface {
 public:
  // `sysfs_root` is where peer-direct support (an NVIDIA peer-memory client) is looked up: ""
  // for the real /sys; tests give a directory that mirrors its layout.
  explicit CudaIface(std::string sysfs_root = {}) : sysfs_root_(std::move(sysfs_root)) {}

  int iface() const override { return HMR_HMEM_CUDA; }
  const char* name() const override { return "cuda"; }

  Status init() override;
  Result<int> device_count() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  // One cuPointerGetAttributes: type, device, kind and the BUFFER_ID of the segment at ptr.
  Status identify(const void* ptr, size_t len, hmem::AllocationIdentity& out) override;
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  // cuPointerSetAttribute(SYNC_MEMOPS = 1) on the allocation, in its device's context when the
  // thread has none; a refusal (NOT_SUPPORTED for VMM memory) is logged and left.
  void order_copies_for_nic(const hmem::PointerInfo& memory) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  // Copies, allocation and host registration run in the device's primary context, which the
  // iface retains on first use and releases when it is destroyed (cuda_memory.cpp).  Memory
  // from mem_alloc lives in that context: free it before the iface goes away.
  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;
  Status host_register(void* ptr, size_t len) override;
  Status host_unregister(void* ptr) override;
  Result<void*> mem_alloc(hmem::DeviceId device, size_t len, hmem::MemoryKind kind) override;
  Status mem_free(void* ptr) override;

  // BUFFER_ID changes whenever an address is freed and reallocated (or a VMM segment remapped).
  FreeTracking free_tracking() const override { return FreeTracking::alloc_id; }

  // The library init loaded (empty before), and the driver version it reported (e.g. 12080).
  std::string library_path() const override;
  std::string runtime_version() const override;
  int driver_version() const { return driver_version_; }

 private:
  // What one cuPointerGetAttributes says of a pointer (query() and identify() both ask it).
  struct Identity {
    unsigned int memory_type = 0;
    int ordinal = -1;
    unsigned long long buffer_id = 0;
    hmem::MemoryKind kind = hmem::MemoryKind::device_only;
  };
  Status identity_at(const void* ptr, size_t len, Identity& found);
  Status check_initialized() const;
  hmem::Capability dmabuf_capability(int ordinal, CUdevice device) const;
  hmem::Capability peer_direct_capability(int ordinal, CUdevice device) const;
  std::string pci_bus_id(CUdevice device) const;
  // The CUDA memory a copy touches: query() of it, or a reason naming `what` for host memory.
  Result<hmem::PointerInfo> device_range(const void* ptr, size_t len, const char* what);
  template <typename Call>  // defined and used in cuda_memory.cpp
  Result<CUresult> in_device_context(int ordinal, Call call);
  // For calls that need some current context but not a particular one (dma-buf export, and
  // cuMemGetAddressRange on old drivers): the caller's, else `ordinal`'s primary context.
  Result<ScopedCurrentContext> any_current_context(int ordinal);

  std::string sysfs_root_;
  std::optional<hmem::SymbolTable> library_;  // set only once init has fully succeeded
  CudaSymbols symbols_;
  int driver_version_ = 0;
  int device_count_ = 0;
  // The process that initialised the driver: a child forked from it cannot use the driver
  // (every call answers NOT_INITIALIZED), and holds no CUDA memory of its own.
  uint64_t init_fork_generation_ = 0;  // util/fork_generation.h, at init
  std::vector<std::string> bus_ids_;  // per ordinal, read once at init (empty if unknown)
  // Whether the driver answers CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR/SIZE (cuda_mapped_range.h);
  // cleared for good at the first refusal.
  std::atomic<bool> mapping_attributes_{true};
  // Declared after library_ so it is destroyed first: its releases call into the library.
  PrimaryContexts contexts_;
};

}  // namespace hmr::cuda
