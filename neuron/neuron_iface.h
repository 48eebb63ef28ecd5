// The AWS Neuron memory interface, on the Neuron runtime (libnrt.so.1), dlopen'ed at init.
//
// nrt has no pointer query, so hmr knows Neuron memory only through its own allocations:
// mem_alloc records each tensor with its VA range, and query answers from that table
// (HMR_ENOENT for anything else).  Memory an application allocated with nrt itself is not
// detectable: the caller declares it (iface HMR_HMEM_NEURON, device = vnc), and export_dmabuf
// then asks the runtime directly.  The runtime reports no frees either (explicit_only): an
// application must invalidate a range through hmr before it frees that memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "hmem/iface.h"
#include "hmem/owned_allocations.h"
#include "hmem/symbol_table.h"
#include "neuron/neuron_symbols.h"
#include "neuron/neuron_tensor.h"

namespace hmr::neuron {

inline constexpr const char* kNeuronDefaultLibrary = "libnrt.so.1";  // HMR_NEURON_LIBRARY overrides
// Allocation and export sizes are whole 4 KiB units, as perftest rounds them for nrt.
inline constexpr size_t kNeuronGranule = 4096;

class NeuronIface final : public hmem::Iface {
 public:
  NeuronIface() = default;
  NeuronIface(const NeuronIface&) = delete;
  NeuronIface& operator=(const NeuronIface&) = delete;
  // Tensors hmr allocated and nobody freed are freed here, before the runtime is unloaded.
  ~NeuronIface() override = default;

  int iface() const override { return HMR_HMEM_NEURON; }
  const char* name() const override { return "neuron"; }

  Status init() override;
  Result<int> device_count() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;
  Status host_register(void* ptr, size_t len) override;
  Status host_unregister(void* ptr) override;

  // Device memory only (an nrt tensor placed on vnc `device`), `len` rounded up to 4 KiB.
  Result<void*> mem_alloc(hmem::DeviceId device, size_t len, hmem::MemoryKind kind) override;
  Status mem_free(void* ptr) override;

  FreeTracking free_tracking() const override { return FreeTracking::explicit_only; }

  std::string library_path() const override;
  std::string runtime_version() const override;

 private:
  // What a lookup copies out with a tensor's span, so no lock is held across a runtime call.
  struct TensorDetails {
    nrt_tensor_t* tensor = nullptr;
    int vnc = 0;
  };
  using Tensors = hmem::OwnedAllocations<OwnedTensor, TensorDetails>;
  using TensorSpan = Tensors::Span;

  Status check_initialized() const;
  // The tensor holding all of [address, address + len): HMR_ENOENT when no tensor holds
  // `address`, HMR_EINVAL when the range runs past its tensor.
  Result<TensorSpan> tensor_for_range(const void* address, size_t len, const char* what) const;
  Result<hmem::DmabufExport> export_v2(uintptr_t address, size_t length);
  Result<hmem::DmabufExport> export_v1(uintptr_t address, size_t length,
                                       const std::optional<TensorSpan>& known);

  // Declared first so it is destroyed last: every tensor is freed while the runtime is loaded.
  std::optional<hmem::SymbolTable> library_;  // set only once init has fully succeeded
  NrtSymbols symbols_;
  int device_count_ = 0;
  std::string version_;

  Tensors tensors_;  // the tensors hmr allocated, keyed by VA
};

}  // namespace hmr::neuron
