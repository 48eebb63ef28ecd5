// The Habana SynapseAI memory interface: libSynapse.so for the runtime (initialisation, device
// count, the acquired device's fd), libhl-thunk.so for device memory hmr allocates itself and
// for every dma-buf export, and libscal.so to find the pool the application's memory lies in,
// all dlopen'ed at init (the last two optional).
//
// No library answers "what is this pointer", so hmr knows Gaudi memory only through its own
// allocations (mem_alloc records each mapping with its device VA range) and answers
// HMR_ENOENT for anything else.  Memory the application allocated with SynapseAI must be
// declared by the caller (iface HMR_HMEM_SYNAPSEAI); export_dmabuf then exports it through
// hl-thunk from the "global_hbm" pool's mapping (hbm_pool_dmabuf.h), or, only where the
// application says its HCCL is set up (HMR_SYNAPSEAI_HCCL_DMABUF=1), through HCCL's own
// dma-buf (hccl_dmabuf.h): HCCL's lookup crashes the process before a communicator exists.
// Neither reports frees (explicit_only): an application must invalidate a range through hmr
// before it frees that memory.  Gaudi device VAs are not CPU addresses: hmr never touches them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "hmem/iface.h"
#include "hmem/owned_allocations.h"
#include "hmem/symbol_table.h"
#include "synapseai/hlthunk_memory.h"
#include "synapseai/hlthunk_symbols.h"
#include "synapseai/scal_symbols.h"
#include "synapseai/synapse_symbols.h"
#include "util/retried_answer.h"

namespace hmr::synapseai {

inline constexpr const char* kSynapseDefaultLibrary = "libSynapse.so";  // HMR_SYNAPSEAI_LIBRARY
inline constexpr const char* kHlthunkDefaultLibrary = "libhl-thunk.so";  // HMR_HLTHUNK_LIBRARY
inline constexpr const char* kScalDefaultLibrary = "libscal.so";  // HMR_SCAL_LIBRARY
// Set to 1 by an application whose HCCL has a communicator with gaudi-direct: memory it
// allocated may then be exported through HCCL where hl-thunk and SCAL cannot.
inline constexpr const char* kHcclDmabufVariable = "HMR_SYNAPSEAI_HCCL_DMABUF";

class SynapseaiIface final : public hmem::Iface {
 public:
  SynapseaiIface() = default;
  SynapseaiIface(const SynapseaiIface&) = delete;
  SynapseaiIface& operator=(const SynapseaiIface&) = delete;
  // Frees the device memory hmr allocated and nobody freed, then closes the device hl-thunk
  // opened.  Never calls synDestroy (see synapse_symbols.h).
  ~SynapseaiIface() override;

  int iface() const override { return HMR_HMEM_SYNAPSEAI; }
  const char* name() const override { return "synapseai"; }

  Status init() override;
  Result<int> device_count() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;
  Status host_register(void* ptr, size_t len) override;
  Status host_unregister(void* ptr) override;

  // Device memory only, on device 0: the device hl-thunk opens for hmr on first use (the one
  // HLS_MODULE_ID names, or the host's only device: hlthunk_device.h; its PCI bus id is the
  // allocation's sys_dev).  `len` is rounded up to host pages.
  Result<void*> mem_alloc(hmem::DeviceId device, size_t len, hmem::MemoryKind kind) override;
  // HMR_EBUSY, keeping the memory, while a dma-buf of it is alive (the driver refuses to unmap
  // exported memory): free it again once its MRs and dma-buf fds are gone.  A refused
  // hlthunk_device_memory_free keeps the handle too: mem_free of the same address asks again.
  Status mem_free(void* ptr) override;

  FreeTracking free_tracking() const override { return FreeTracking::explicit_only; }

  std::string library_path() const override;
  std::string runtime_version() const override;
  // The hl-thunk library init loaded ("" before, or when it could not: then hmr_mem_alloc
  // refuses, and memory the application allocated is exported only through HCCL, if allowed).
  std::string hlthunk_path() const;
  // The SCAL library init loaded ("" before, or when it could not).
  std::string scal_path() const;

 private:
  // SynapseAI memory needs nothing beyond its span: hmr allocates only on device 0.
  struct NoDetails {};
  using Allocations = hmem::OwnedAllocations<HlthunkMemory, NoDetails>;
  using MemorySpan = Allocations::Span;

  Status check_initialized() const;
  // The device fd hl-thunk opened for hmr, opening it on first use.
  Result<int> open_device();
  // The opened device's PCI location ("" while hl-thunk would not say, or before the open).
  std::string bus_id() const;
  // The hmr allocation holding all of [address, address + len): HMR_ENOENT when none holds
  // `address`, HMR_EINVAL when the range runs past it.
  Result<MemorySpan> memory_for_range(const void* address, size_t len, const char* what) const;
  // Through hl-thunk: the mapping `span` is named by its start, the range by an offset.
  Result<hmem::DmabufExport> export_own(const MemorySpan& span, uintptr_t address, size_t length);
  // mem_free of an address none of hmr's mappings starts at: frees memory there whose free
  // was refused before, if any (nullopt: none).
  std::optional<Status> free_unfreed(uintptr_t address);
  // Memory the application allocated: through hl-thunk from its pool's mapping
  // (hbm_pool_dmabuf.h), else through HCCL's gaudi-direct dma-buf where the application allows
  // it (hccl_dmabuf.h).
  Result<hmem::DmabufExport> export_declared(uintptr_t address, size_t length);
  // Which of those this process has, and why not where it has neither.
  bool can_export_from_hbm_pool() const;
  bool can_export_through_hccl() const;
  std::string why_declared_memory_cannot_export() const;

  // Declared first so they are unloaded last, after every allocation is freed.
  std::optional<hmem::SymbolTable> synapse_library_;  // set only once init fully succeeded
  std::optional<hmem::SymbolTable> hlthunk_library_;  // optional: hmr's own allocations only
  Status hlthunk_missing_;                            // why hlthunk_library_ is empty
  std::optional<hmem::SymbolTable> scal_library_;     // optional: the application's memory
  Status scal_missing_;                               // why scal_library_ is empty
  SynapseSymbols synapse_;
  HlthunkSymbols hlthunk_;
  ScalSymbols scal_;
  bool hccl_dmabuf_allowed_ = false;  // HMR_SYNAPSEAI_HCCL_DMABUF, read at init
  int device_count_ = 0;
  std::string version_;

  // Opened lazily: Gaudi devices are exclusive, so opening one at init would take it from an
  // application that acquires it through SynapseAI afterwards.
  std::atomic<int> device_fd_{-1};

  std::mutex open_mutex_;      // held by open_device() around the first open only
  // The PCI location of the device behind device_fd_; asked again while hl-thunk would not say.
  mutable RetriedAnswer<std::string> bus_id_;
  Allocations allocations_;   // the memory hmr allocated, keyed by device VA
  // Memory hl-thunk unmapped but refused to free: no longer at any address, still allocated,
  // kept by the address it had so that mem_free of that address asks again (the destructor
  // does too).  Several may have had one address.  Never held across a driver call.
  std::mutex unfreed_mutex_;
  std::multimap<uintptr_t, HlthunkMemory> unfreed_;
};

}  // namespace hmr::synapseai
