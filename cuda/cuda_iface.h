// The CUDA memory interface, on the driver API (libcuda.so.1), dlopen'ed at init.
//
// Driver API rather than runtime API: it is the library every CUDA machine has, it needs no
// context for pointer queries, and it is what the NIC-facing calls (dma-buf) live in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_symbols.h"
#include "hmem/iface.h"
#include "hmem/symbol_table.h"

namespace hmr::cuda {

inline constexpr const char* kCudaDefaultLibrary = "libcuda.so.1";  // HMR_CUDA_LIBRARY overrides

class CudaIface final : public hmem::Iface {
 public:
  int iface() const override { return HMR_HMEM_CUDA; }
  const char* name() const override { return "cuda"; }

  Status init() override;
  Result<int> device_count() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  // The library init loaded (empty before), and the driver version it reported (e.g. 12080).
  std::string library_path() const override;
  std::string runtime_version() const override;
  int driver_version() const { return driver_version_; }

 private:
  Status check_initialized() const;
  hmem::Capability dmabuf_capability(int ordinal, CUdevice device) const;
  hmem::Capability peer_direct_capability(int ordinal, CUdevice device) const;
  std::string pci_bus_id(CUdevice device) const;

  std::optional<hmem::SymbolTable> library_;  // set only once init has fully succeeded
  CudaSymbols symbols_;
  int driver_version_ = 0;
  int device_count_ = 0;
  std::vector<std::string> bus_ids_;  // per ordinal, read once at init (empty if unknown)
};

}  // namespace hmr::cuda
