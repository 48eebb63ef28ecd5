// The ROCm memory interface, on the ROCr (HSA) runtime (libhsa-runtime64.so.1), dlopen'ed at init.
//
// ROCr rather than HIP: it is what every ROCm machine has underneath HIP, its pointer queries
// need no device context, and dma-buf export, host pinning and free notifications live there.
//
// Devices are numbered as hmr_mr_attr.device names them for ROCr: the index of the GPU among the
// runtime's GPU agents, in the order hsa_iterate_agents gives them (HIP's ordinal order).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hmem/iface.h"
#include "hmem/symbol_table.h"
#include "rocr/rocr_free_watch.h"
#include "rocr/rocr_kernel_dmabuf.h"
#include "rocr/rocr_symbols.h"
#include "util/retried_answer.h"

namespace hmr::rocr {

// HMR_ROCR_LIBRARY overrides it.
inline constexpr const char* kRocrDefaultLibrary = "libhsa-runtime64.so.1";

class RocrIface final : public hmem::Iface {
 public:
  RocrIface();
  // Reads the kernel's build options from `kernel_config` instead of /boot and /proc (tests).
  explicit RocrIface(KernelConfigSources kernel_config);
  // Deregisters its free notifications and balances its hsa_init with hsa_shut_down.
  ~RocrIface() override;
  RocrIface(const RocrIface&) = delete;
  RocrIface& operator=(const RocrIface&) = delete;

  int iface() const override { return HMR_HMEM_ROCR; }
  const char* name() const override { return "rocr"; }

  Status init() override;
  Result<int> device_count() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;
  // hsa_amd_memory_lock for every agent.  The agent-side address the runtime may hand back is
  // not kept: NICs register the host address.
  Status host_register(void* ptr, size_t len) override;
  Status host_unregister(void* ptr) override;

  // device_only: the GPU's coarse-grained VRAM pool.  managed: the CPU's fine-grained system
  // pool, made accessible to every GPU.  host_alloc: page-aligned host memory pinned with
  // hsa_amd_memory_lock (what query() calls host_alloc); mem_free unpins and unmaps it.
  Result<void*> mem_alloc(hmem::DeviceId device, size_t len, hmem::MemoryKind kind) override;
  Status mem_free(void* ptr) override;

  FreeTracking free_tracking() const override { return FreeTracking::free_events; }
  Status watch_free(const hmem::PointerInfo& info, FreeCallback on_free, void* context) override;
  Status unwatch_free(const hmem::PointerInfo& info, void* context) override;

  std::string library_path() const override;
  // "HSA 1.1, ROCr build <id>" (the build part only when the runtime reports one).
  std::string runtime_version() const override;

 private:
  // A memory pool as discovery left it: found, known to be absent (nullopt), or not yet known
  // because a runtime call failed, in which case the next allocation that needs the pool asks
  // again (a transient refusal at init must not disable mem_alloc for good, and the
  // allocation's failure names the call).
  using PoolLookup = RetriedAnswer<std::optional<hsa_amd_memory_pool_t>>;

  struct Gpu {
    hsa_agent_t agent{};
    std::string name;
    std::string pci_bus_id;  // "" when the runtime does not say
    PoolLookup vram_pool;
  };

  struct Topology {
    std::vector<hsa_agent_t> cpu_agents;
    std::vector<Gpu> gpus;
    PoolLookup system_pool;
  };

  Status check_initialized() const;
  // query()'s answer, in a forked child, for a range ROCr does not know and nothing maps.
  Status unmapped_in_child(const void* ptr, size_t len) const;
  static Result<Topology> discover(const RocrSymbols& symbols, const char* path);
  // The agent's global pool with `wanted_flag` that allows allocation (nullopt: it has none);
  // an error naming the call when the runtime would not say.
  static Result<std::optional<hsa_amd_memory_pool_t>> find_pool(const RocrSymbols& symbols,
                                                                hsa_agent_t agent,
                                                                uint32_t wanted_flag);
  static PoolLookup look_up_pool(const RocrSymbols& symbols, hsa_agent_t agent,
                                 uint32_t wanted_flag);
  // The pool `lookup` describes, asking the runtime again (no lock held) when init could not.
  Result<std::optional<hsa_amd_memory_pool_t>> pool_of(PoolLookup& lookup, hsa_agent_t agent,
                                                       uint32_t wanted_flag);
  static Gpu describe_gpu(const RocrSymbols& symbols, hsa_agent_t agent);
  static std::string read_version(const RocrSymbols& symbols);
  // `known` is false when the runtime would not answer: the question is asked again later.
  static hmem::Capability runtime_dmabuf_capability(const RocrSymbols& symbols,
                                                    const char* path, bool& known);
  // Runtime support, then the kernel's build options (read once, on first need).
  hmem::Capability dmabuf_capability();
  Status copy(void* dst, const void* src, size_t len, const char* direction);
  Result<void*> alloc_pinned_host(size_t len);
  Result<void*> alloc_from_pool(hsa_amd_memory_pool_t pool, size_t len, const char* what,
                                bool share_with_gpus);

  KernelConfigSources kernel_config_;
  std::once_flag kernel_once_;
  hmem::Capability kernel_dmabuf_;

  // Everything below is written by init only, once it has fully succeeded.
  std::optional<hmem::SymbolTable> library_;
  RocrSymbols symbols_;
  std::vector<hsa_agent_t> cpu_agents_;
  std::vector<Gpu> gpus_;  // index = hmr's ROCr device id
  PoolLookup system_pool_;
  std::string version_;
  // Whether the runtime can export dma-bufs; asked again while it would not say.
  RetriedAnswer<hmem::Capability> runtime_dmabuf_;
  // The process that initialised the runtime: in a child forked from it ROCr knows no address
  // (query() then asks the kernel whether the address is mapped at all).
  uint64_t init_fork_generation_ = 0;  // util/fork_generation.h, at init

  // Heap-allocated: the runtime holds its address as callback user_data.
  std::unique_ptr<FreeWatchTable> watches_ = std::make_unique<FreeWatchTable>();
  // Identities for memory ROCr reports no free of (pinned, IPC-imported, graphics-interop): a
  // new one on every query, so such memory is never matched to an earlier registration.
  std::atomic<uint64_t> unwatchable_ids_{0};
  std::mutex pinned_mutex_;
  std::unordered_map<uintptr_t, size_t> pinned_allocations_;  // mem_alloc(host_alloc): address, mapped length
};

}  // namespace hmr::rocr
