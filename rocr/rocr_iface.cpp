#include "rocr/rocr_iface.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <new>
#include <utility>

#include "hmem/page_range.h"
#include "rocr/rocr_error.h"
#include "util/fork_generation.h"
#include "util/log.h"
#include "util/mapped_range.h"

namespace hmr::rocr {

using hmem::Capability;
using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::DmabufFd;
using hmem::MemoryKind;
using hmem::MemoryRange;
using hmem::PointerInfo;

namespace {

// Whether ROCr runs deallocation callbacks for memory of this pointer type: memory-pool
// allocations only (HSA, and HSA_VMEM whose handle was made from a pool).
bool has_free_callbacks(int type) {
  return type == HSA_EXT_POINTER_TYPE_HSA || type == HSA_EXT_POINTER_TYPE_HSA_VMEM;
}

// Iteration callbacks run inside the runtime: no exception may cross it.
template <typename Handle>
hsa_status_t collect(Handle handle, void* data) {
  try {
    static_cast<std::vector<Handle>*>(data)->push_back(handle);
  } catch (const std::bad_alloc&) {
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  return HSA_STATUS_SUCCESS;
}

bool same_agent(hsa_agent_t a, hsa_agent_t b) { return a.handle == b.handle; }

// Which of the two views of an allocation holds `address`: for memory pinned by
// hsa_amd_memory_lock the GPU may see it at another address than the CPU does.
std::optional<uintptr_t> base_holding(const hsa_amd_pointer_info_t& info, uintptr_t address) {
  for (const void* base : {info.agentBaseAddress, info.hostBaseAddress}) {
    const auto start = reinterpret_cast<uintptr_t>(base);
    if (base != nullptr && address >= start && address - start < info.sizeInBytes) return start;
  }
  return std::nullopt;
}

// What hsa_init's failure means for the user.  ROCr answers OUT_OF_RESOURCES when it cannot open
// a GPU at all, which is "no device" rather than "out of memory".
std::string init_hint(hsa_status_t status) {
  if (status != HSA_STATUS_ERROR_OUT_OF_RESOURCES) return {};
  if (access("/dev/kfd", F_OK) != 0) {
    return "; /dev/kfd does not exist: no amdgpu kernel driver, or no GPU passed into this "
           "container";
  }
  return "; check that this user may open /dev/kfd and /dev/dri/renderD*";
}

}  // namespace

RocrIface::RocrIface() : RocrIface(default_kernel_config_sources()) {}

RocrIface::RocrIface(KernelConfigSources kernel_config)
    : kernel_config_(std::move(kernel_config)) {}

RocrIface::~RocrIface() {
  if (!library_.has_value()) return;
  // Every registration hmr made must be gone from the runtime before the table it names as
  // user_data is freed.  Only SUCCESS says so: the runtime deregisters under the lock its
  // frees take the notifiers under (ROCR-Runtime runtime.cpp, DeregisterReleaseNotifier and
  // FreeMemory), so afterwards no free can reach the trampoline.  Any other answer leaves a
  // callback the runtime may still run: INVALID_ARGUMENT when it had none for the allocation
  // (a free took it and may be running it right now, after dropping that lock), anything else
  // when it did not look.  The table then outlives this iface (kept_after_refused_
  // deregistration), emptied, so a late callback finds nothing to deliver.
  int refused = 0;
  std::string first_refusal;
  for (const auto& [base, registrations] : watches_->take_registrations()) {
    for (int i = 0; i < registrations; ++i) {
      const hsa_status_t status = symbols_.hsa_amd_deregister_deallocation_callback(
          reinterpret_cast<void*>(base), &FreeWatchTable::trampoline);
      if (status == HSA_STATUS_SUCCESS) continue;
      if (refused++ == 0) {
        char text[96];
        std::snprintf(text, sizeof text, "0x%" PRIx64 ": ", base);
        first_refusal = text + describe_hsa_status(symbols_, status);
      }
    }
  }
  if (refused > 0) {
    log_message(LogLevel::warn, "rocr iface shutdown: hsa_amd_deregister_deallocation_callback "
                "refused %d of hmr's free callbacks (first %s); the runtime may still call them, "
                "so their table is kept for the rest of the process (it delivers nothing now)",
                refused, first_refusal.c_str());
    FreeWatchTable::keep_for_late_callbacks(std::move(watches_));
  }
  // Pinned host memory the caller never freed stays the caller's; hsa_shut_down unpins it.
  const hsa_status_t shut = symbols_.hsa_shut_down();
  if (shut != HSA_STATUS_SUCCESS) {
    log_message(LogLevel::warn, "rocr iface shutdown: hsa_shut_down failed: %s (the runtime "
                "keeps hmr's reference until the process exits)",
                describe_hsa_status(symbols_, shut).c_str());
  }
}

Status RocrIface::init() {
  if (library_.has_value()) return ok_status();

  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load("ROCR", kRocrDefaultLibrary, rocr_symbol_specs());
  if (!table.ok()) {
    return Status(table.status().code(), "rocr iface unavailable: " + table.status().reason());
  }
  RocrSymbols symbols;
  bind_rocr_symbols(*table, symbols);
  const char* path = table->path().c_str();

  const hsa_status_t status = symbols.hsa_init();
  if (status != HSA_STATUS_SUCCESS) {
    const int code =
        status == HSA_STATUS_ERROR_OUT_OF_RESOURCES ? HMR_ENODEV : hmr_code_for(status);
    return make_error(code, "rocr iface unavailable: hsa_init() in '%s' failed: %s%s", path,
                      describe_hsa_status(symbols, status).c_str(), init_hint(status).c_str());
  }
  // hsa_init counts references: every failure from here balances it.
  Result<Topology> topology = discover(symbols, path);
  if (!topology.ok()) {
    symbols.hsa_shut_down();
    return topology.status();
  }

  symbols_ = symbols;
  init_fork_generation_ = fork_generation();
  cpu_agents_ = std::move(topology->cpu_agents);
  gpus_ = std::move(topology->gpus);
  system_pool_ = std::move(topology->system_pool);
  version_ = read_version(symbols);
  bool dmabuf_known = false;
  const Capability dmabuf = runtime_dmabuf_capability(symbols, path, dmabuf_known);
  if (dmabuf_known) runtime_dmabuf_.keep(dmabuf);
  library_ = std::move(*table);
  log_message(LogLevel::debug, "rocr iface: '%s', %s, %zu GPU(s), dma-buf: %s",
              library_->path().c_str(), version_.c_str(), gpus_.size(),
              dmabuf.supported ? "runtime can export" : dmabuf.reason.c_str());
  return ok_status();
}

Result<RocrIface::Topology> RocrIface::discover(const RocrSymbols& symbols, const char* path) {
  std::vector<hsa_agent_t> agents;
  hsa_status_t status = symbols.hsa_iterate_agents(&collect<hsa_agent_t>, &agents);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status),
                      "rocr iface unavailable: hsa_iterate_agents in '%s' failed: %s", path,
                      describe_hsa_status(symbols, status).c_str());
  }
  Topology topology;
  for (hsa_agent_t agent : agents) {
    int type = -1;
    status = symbols.hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
    if (status != HSA_STATUS_SUCCESS) {
      return make_error(hmr_code_for(status),
                        "rocr iface unavailable: hsa_agent_get_info(agent 0x%" PRIx64
                        ", DEVICE) in '%s' failed: %s",
                        agent.handle, path, describe_hsa_status(symbols, status).c_str());
    }
    if (type == HSA_DEVICE_TYPE_GPU) topology.gpus.push_back(describe_gpu(symbols, agent));
    if (type == HSA_DEVICE_TYPE_CPU) topology.cpu_agents.push_back(agent);
  }
  if (topology.gpus.empty()) {
    return make_error(HMR_ENODEV, "rocr iface unavailable: the ROCr runtime '%s' sees no GPU agent "
                      "(%zu agent(s), none a GPU)", path, agents.size());
  }
  if (topology.cpu_agents.empty()) {
    topology.system_pool = PoolLookup::known(std::nullopt);  // no CPU agent: no system pool
  } else {
    topology.system_pool = look_up_pool(symbols, topology.cpu_agents.front(),
                                        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
  }
  return topology;
}

Result<std::optional<hsa_amd_memory_pool_t>> RocrIface::find_pool(const RocrSymbols& symbols,
                                                                  hsa_agent_t agent,
                                                                  uint32_t wanted_flag) {
  std::vector<hsa_amd_memory_pool_t> pools;
  const hsa_status_t walked =
      symbols.hsa_amd_agent_iterate_memory_pools(agent, &collect<hsa_amd_memory_pool_t>, &pools);
  if (walked != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(walked),
                      "hsa_amd_agent_iterate_memory_pools(agent 0x%" PRIx64 ") failed: %s",
                      agent.handle, describe_hsa_status(symbols, walked).c_str());
  }
  // A pool the runtime would not describe may be the one wanted: if no other pool is, that
  // refusal is the answer, not "there is no such pool".
  Status undescribed = ok_status();
  for (hsa_amd_memory_pool_t pool : pools) {
    int segment = -1;
    uint32_t flags = 0;
    bool alloc_allowed = false;
    const char* attribute = "SEGMENT";
    hsa_status_t status =
        symbols.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
    if (status == HSA_STATUS_SUCCESS) {
      attribute = "GLOBAL_FLAGS";
      status = symbols.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                                                    &flags);
    }
    if (status == HSA_STATUS_SUCCESS) {
      attribute = "RUNTIME_ALLOC_ALLOWED";
      status = symbols.hsa_amd_memory_pool_get_info(
          pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc_allowed);
    }
    if (status != HSA_STATUS_SUCCESS) {
      if (undescribed.ok()) {
        undescribed = make_error(hmr_code_for(status),
                                 "hsa_amd_memory_pool_get_info(pool 0x%" PRIx64 " of agent "
                                 "0x%" PRIx64 ", %s) failed: %s",
                                 pool.handle, agent.handle, attribute,
                                 describe_hsa_status(symbols, status).c_str());
      }
      continue;
    }
    // The kernel-argument pool is fine-grained system memory too, but small and special.
    if (segment == HSA_AMD_SEGMENT_GLOBAL && alloc_allowed && (flags & wanted_flag) != 0 &&
        (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) == 0) {
      return std::optional<hsa_amd_memory_pool_t>(pool);
    }
  }
  if (!undescribed.ok()) return undescribed;
  return std::optional<hsa_amd_memory_pool_t>();
}

RocrIface::PoolLookup RocrIface::look_up_pool(const RocrSymbols& symbols, hsa_agent_t agent,
                                              uint32_t wanted_flag) {
  Result<std::optional<hsa_amd_memory_pool_t>> found = find_pool(symbols, agent, wanted_flag);
  if (found.ok()) return PoolLookup::known(*found);
  // Not fatal: only mem_alloc needs a pool, and it asks again.
  log_message(LogLevel::warn, "rocr iface: finding the memory pool of agent 0x%" PRIx64
              " failed (asked again at the next allocation from it): %s", agent.handle,
              found.status().reason().c_str());
  return PoolLookup();
}

Result<std::optional<hsa_amd_memory_pool_t>> RocrIface::pool_of(PoolLookup& lookup,
                                                                hsa_agent_t agent,
                                                                uint32_t wanted_flag) {
  if (const std::optional<hsa_amd_memory_pool_t>* known = lookup.get()) return *known;
  // Threads that get here together each ask; the answers agree, and the first one stays.
  Result<std::optional<hsa_amd_memory_pool_t>> found = find_pool(symbols_, agent, wanted_flag);
  if (!found.ok()) {
    return Status(found.status().code(),
                  found.status().reason() + " (finding the memory pool again, as init could "
                  "not; asked again at the next allocation)");
  }
  lookup.keep(*found);
  return *found;
}

RocrIface::Gpu RocrIface::describe_gpu(const RocrSymbols& symbols, hsa_agent_t agent) {
  Gpu gpu;
  gpu.agent = agent;
  char name[kHsaAgentNameSize] = {};
  if (symbols.hsa_agent_get_info(agent, HSA_AGENT_INFO_NAME, name) == HSA_STATUS_SUCCESS) {
    name[sizeof name - 1] = '\0';
    gpu.name = name;
  }
  // A GPU whose location cannot be read still works; it only has no sys_dev.
  uint32_t bdfid = 0;
  uint32_t domain = 0;
  if (symbols.hsa_agent_get_info(agent, HSA_AMD_AGENT_INFO_BDFID, &bdfid) == HSA_STATUS_SUCCESS &&
      symbols.hsa_agent_get_info(agent, HSA_AMD_AGENT_INFO_DOMAIN, &domain) == HSA_STATUS_SUCCESS) {
    char text[32];
    std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", domain, (bdfid >> 8) & 0xffu,
                  (bdfid >> 3) & 0x1fu, bdfid & 0x7u);
    gpu.pci_bus_id = text;
  }
  gpu.vram_pool = look_up_pool(symbols, agent, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
  return gpu;
}

std::string RocrIface::read_version(const RocrSymbols& symbols) {
  uint16_t major = 0;
  uint16_t minor = 0;
  if (symbols.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major) != HSA_STATUS_SUCCESS ||
      symbols.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MINOR, &minor) != HSA_STATUS_SUCCESS) {
    return {};
  }
  std::string version = "HSA " + std::to_string(major) + "." + std::to_string(minor);
  const char* build = nullptr;
  if (symbols.hsa_system_get_info(HSA_AMD_SYSTEM_INFO_BUILD_VERSION, &build) ==
          HSA_STATUS_SUCCESS &&
      build != nullptr && build[0] != '\0') {
    version += std::string(", ROCr build ") + build;
  }
  return version;
}

Capability RocrIface::runtime_dmabuf_capability(const RocrSymbols& symbols, const char* path,
                                                bool& known) {
  known = true;
  if (symbols.hsa_amd_portable_export_dmabuf == nullptr) {
    return Capability::no(
        std::string("the ROCr runtime '") + path +
        "' has no hsa_amd_portable_export_dmabuf (ROCm 5.6 or newer exports dma-bufs)");
  }
  bool supported = false;
  const hsa_status_t status =
      symbols.hsa_system_get_info(HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED, &supported);
  // ROCm 5.2 does not know the attribute (INVALID_ARGUMENT) and never will; any other failure
  // may pass, so it is asked again at the next export rather than kept as a "no" for good.
  if (status != HSA_STATUS_SUCCESS) {
    known = status == HSA_STATUS_ERROR_INVALID_ARGUMENT;
    return Capability::no("hsa_system_get_info(HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED) failed: " +
                          describe_hsa_status(symbols, status) +
                          (known ? "" : " (asked again at the next export)"));
  }
  if (!supported) {
    return Capability::no(
        "the ROCr runtime reports HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED = false (the amdgpu "
        "kernel driver cannot export dma-bufs)");
  }
  return Capability::yes();
}

Capability RocrIface::dmabuf_capability() {
  if (const Capability* known = runtime_dmabuf_.get()) {
    if (!known->supported) return *known;
  } else {
    // init's question went unanswered: asked again.
    bool answered = false;
    Capability runtime = runtime_dmabuf_capability(symbols_, library_->path().c_str(), answered);
    if (answered) runtime_dmabuf_.keep(runtime);
    if (!runtime.supported) return runtime;
  }
  std::call_once(kernel_once_, [this] { kernel_dmabuf_ = kernel_dmabuf_capability(kernel_config_); });
  return kernel_dmabuf_;
}

std::string RocrIface::library_path() const {
  return library_.has_value() ? library_->path() : std::string();
}

std::string RocrIface::runtime_version() const {
  return library_.has_value() ? version_ : std::string();
}

Status RocrIface::check_initialized() const {
  if (library_.has_value()) return ok_status();
  return make_error(HMR_EINVAL, "rocr iface used before a successful init()");
}

Result<int> RocrIface::device_count() {
  HMR_RETURN_IF_ERROR(check_initialized());
  return static_cast<int>(gpus_.size());
}

Result<PointerInfo> RocrIface::query(const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (len == 0 || address + len < address) {
    return make_error(HMR_EINVAL, "rocr query of [%p, +%zu): empty or wrapping range", ptr, len);
  }

  hsa_amd_pointer_info_t info{};
  info.size = sizeof info;
  const hsa_status_t status = symbols_.hsa_amd_pointer_info(ptr, &info, nullptr, nullptr, nullptr);
  if (status != HSA_STATUS_SUCCESS) {
    // Fail closed: an unanswered question is not "host memory".
    return make_error(hmr_code_for(status), "hsa_amd_pointer_info(%p) failed: %s", ptr,
                      describe_hsa_status(symbols_, status).c_str());
  }
  if (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN) {
    if (fork_generation() != init_fork_generation_ && !core::range_mapped(ptr, len)) {
      return unmapped_in_child(ptr, len);
    }
    return not_its_memory("not ROCr memory");
  }
  if (info.size < offsetof(hsa_amd_pointer_info_t, global_flags)) {
    return make_error(HMR_EIO, "the ROCr runtime answers hsa_amd_pointer_info(%p) with a %u-byte "
                      "structure, too old to name the owning agent", ptr, info.size);
  }
  // An address reservation: what ROCm 7 reports for hipMallocManaged memory, and nothing the
  // GPU owns (no agent, no region).  UCX calls it host memory; so does hmr, so the system iface
  // and the host monitors take it.
  if (info.type == HSA_EXT_POINTER_TYPE_RESERVED_ADDR) return not_its_memory("ROCr reserved");
  if (info.type != HSA_EXT_POINTER_TYPE_HSA && info.type != HSA_EXT_POINTER_TYPE_LOCKED &&
      info.type != HSA_EXT_POINTER_TYPE_GRAPHICS && info.type != HSA_EXT_POINTER_TYPE_IPC &&
      info.type != HSA_EXT_POINTER_TYPE_HSA_VMEM) {
    return make_error(HMR_EOPNOTSUPP, "%p is ROCr memory of pointer type %d, which hmr does not "
                      "know", ptr, info.type);
  }

  int gpu = -1;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (same_agent(gpus_[i].agent, info.agentOwner)) gpu = static_cast<int>(i);
  }
  bool cpu_owned = false;
  for (hsa_agent_t cpu : cpu_agents_) cpu_owned = cpu_owned || same_agent(cpu, info.agentOwner);
  if (gpu < 0 && !cpu_owned) {
    return make_error(HMR_EIO, "%p is ROCr memory owned by agent 0x%" PRIx64 ", which init did "
                      "not see", ptr, info.agentOwner.handle);
  }

  MemoryKind kind = MemoryKind::device_only;
  if (info.type == HSA_EXT_POINTER_TYPE_LOCKED) {
    kind = MemoryKind::host_alloc;
  } else if (gpu < 0) {
    // ROCr has no "managed" pointer type.  Memory from a CPU agent's pool is coherent system
    // memory that every agent may touch, and what hipMallocManaged falls back to; UCX calls it
    // ROCM_MANAGED, and hmr does the same so that it is never exported as dma-buf.
    kind = MemoryKind::managed;
  }

  const std::optional<uintptr_t> base = base_holding(info, address);
  if (!base.has_value()) {
    return make_error(HMR_EIO, "hsa_amd_pointer_info(%p) describes an allocation that does not "
                      "hold it", ptr);
  }
  if (len > info.sizeInBytes - (address - *base)) {
    return make_error(HMR_EINVAL, "[%p, +%zu) is not inside one ROCr allocation: the allocation "
                      "is [0x%" PRIxPTR ", +%zu)", ptr, len, *base, info.sizeInBytes);
  }

  PointerInfo result;
  result.iface = HMR_HMEM_ROCR;
  // Host-side ROCr memory belongs to no GPU; it reports device 0, as libfabric does.
  result.device = DeviceId{gpu < 0 ? 0u : static_cast<uint64_t>(gpu)};
  result.base = *base;
  result.alloc_len = info.sizeInBytes;
  result.kind = kind;
  // ROCr has no allocation ids.  Memory-pool allocations report their frees (a deallocation
  // callback: watch_free).  Pinned, IPC-imported and graphics-interop memory report nothing
  // (Runtime::RegisterReleaseNotifier knows only allocation_map_ entries with a region), so
  // unlock + free + re-lock at one address would look unchanged: each query gets a new id,
  // and such memory never hits an earlier cached registration (libfabric does not cache it).
  result.alloc_id = has_free_callbacks(info.type) ? 0 : ++unwatchable_ids_;
  if (gpu >= 0) result.sys_dev = gpus_[static_cast<size_t>(gpu)].pci_bus_id;
  return result;
}

// A child forked from the process that initialised ROCr gets UNKNOWN for every address: ROCr
// answers UNKNOWN whenever libhsakmt refuses (Runtime::PtrInfo), and libhsakmt refuses every
// call of a forked child (CHECK_KFD_OPEN, hsakmt_forked; it cannot use the parent's KFD).  So
// ROCr cannot tell the parent's GPU memory there, but the kernel can: libhsakmt maps every
// allocation it makes, VRAM and system memory alike, MADV_DONTFORK (fmm_map_to_cpu,
// fmm_allocate_host_gpu), so none of it exists in the child.  Host memory the child registers
// is mapped; a range that is not is never host memory, and calling it host memory would ask the
// NIC to register the parent's device addresses: fail closed.
Status RocrIface::unmapped_in_child(const void* ptr, size_t len) const {
  return make_error(HMR_EFAULT, "[%p, +%zu) is not mapped in this process, a child forked from "
                    "the process that initialised ROCr: if it is that process's GPU memory, it "
                    "is not inherited (libhsakmt maps ROCr's memory MADV_DONTFORK) and ROCr does "
                    "not serve a forked child (libhsakmt's is_forked_child check), so register "
                    "it in the parent; host memory of this process registers as usual", ptr, len);
}

Result<DmabufExport> RocrIface::export_dmabuf(MemoryRange range) {
  HMR_RETURN_IF_ERROR(check_initialized());
  Result<PointerInfo> info = query(range.address, range.length);
  if (!info.ok()) return info.status();
  // IPC-imported and graphics-interop memory is GPU memory ROCr keeps without a region, and its
  // dma-buf export reads that region unchecked: a crash, not an error.  UCX exports only
  // memory-pool (HSA) allocations; so does hmr.  Only those have no id of hmr's (query()).
  if (info->kind == MemoryKind::device_only && info->alloc_id != 0) {
    return make_error(HMR_EOPNOTSUPP, "%p is ROCr memory imported from another process or from "
                      "a graphics API: ROCr exports only memory it allocated from a pool as "
                      "dma-buf; register the exporting process's allocation instead",
                      range.address);
  }
  if (info->kind != MemoryKind::device_only) {
    return make_error(HMR_EOPNOTSUPP, "%p is ROCr %s memory: only device memory is exported as "
                      "dma-buf (managed pages migrate; host memory is registered by address)",
                      range.address, hmem::memory_kind_name(info->kind));
  }
  const Capability capability = dmabuf_capability();
  if (!capability.supported) {
    return make_error(HMR_EOPNOTSUPP, "rocr dma-buf export of %p on device %" PRIu64
                      " unavailable: %s", range.address, info->device.value,
                      capability.reason.c_str());
  }

  const hmem::PageRange pages = hmem::page_round(reinterpret_cast<uintptr_t>(range.address),
                                                 range.length, hmem::host_page_size());
  int fd = -1;
  uint64_t buffer_offset = 0;  // where pages.start lies in the exported buffer object
  const hsa_status_t status = symbols_.hsa_amd_portable_export_dmabuf(
      reinterpret_cast<const void*>(pages.start), pages.length, &fd, &buffer_offset);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status),
                      "hsa_amd_portable_export_dmabuf(0x%" PRIxPTR ", %zu) on rocr device %" PRIu64
                      " failed: %s",
                      pages.start, pages.length, info->device.value,
                      describe_hsa_status(symbols_, status).c_str());
  }
  if (fd < 0) {
    return make_error(HMR_EIO, "hsa_amd_portable_export_dmabuf succeeded but gave fd %d", fd);
  }
  DmabufExport exported;
  exported.fd = DmabufFd(fd);
  // The dma-buf is the whole buffer object behind the allocation, which may be larger than the
  // pages asked for; a dma-buf reports its size to lseek(SEEK_END).
  const off_t size = lseek(fd, 0, SEEK_END);
  (void)lseek(fd, 0, SEEK_SET);
  exported.offset = buffer_offset + pages.offset;
  exported.len = range.length;
  exported.exported_len =
      size > 0 ? static_cast<size_t>(size) : static_cast<size_t>(buffer_offset + pages.length);
  if (exported.offset + exported.len > exported.exported_len) {
    return make_error(HMR_EIO, "hsa_amd_portable_export_dmabuf(0x%" PRIxPTR ", %zu) gave offset "
                      "%" PRIu64 " into a %zu-byte dma-buf, which cannot hold the range",
                      pages.start, pages.length, buffer_offset, exported.exported_len);
  }
  return exported;
}

Result<DeviceCapabilities> RocrIface::capabilities(DeviceId device) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device.value >= gpus_.size()) {
    return make_error(HMR_EINVAL, "rocr device %" PRIu64 " does not exist (this process sees %zu "
                      "GPU(s))", device.value, gpus_.size());
  }
  DeviceCapabilities caps;
  caps.device = device;
  caps.sys_dev = gpus_[device.value].pci_bus_id;
  caps.dmabuf = dmabuf_capability();
  caps.peer_direct = Capability::no(
      "AMD peer-direct (the amdgpu peer-memory client of ib_core) is not "
      "probed by this hmr build; ROCm memory reaches NICs through dma-buf");
  caps.ipc = Capability::no("ROCr IPC export is not implemented in this hmr build");
  return caps;
}

Status RocrIface::copy(void* dst, const void* src, size_t len, const char* direction) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (dst == nullptr || src == nullptr || len == 0) {
    return make_error(HMR_EINVAL, "rocr copy %s: destination %p, source %p, %zu bytes: null "
                      "pointer or nothing to copy", direction, dst, src, len);
  }
  // Synchronous: the bytes are in place when it returns.
  const hsa_status_t status = symbols_.hsa_memory_copy(dst, src, len);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status), "hsa_memory_copy(%p, %p, %zu) %s failed: %s", dst,
                      src, len, direction, describe_hsa_status(symbols_, status).c_str());
  }
  return ok_status();
}

Status RocrIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  return copy(device_dst, host_src, len, "to the device");
}

Status RocrIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  return copy(host_dst, device_src, len, "from the device");
}

Status RocrIface::host_register(void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr || len == 0) {
    return make_error(HMR_EINVAL, "rocr host registration of [%p, +%zu): null or empty", ptr, len);
  }
  void* agent_ptr = nullptr;
  const hsa_status_t status = symbols_.hsa_amd_memory_lock(ptr, len, nullptr, 0, &agent_ptr);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status), "hsa_amd_memory_lock(%p, %zu) failed: %s", ptr, len,
                      describe_hsa_status(symbols_, status).c_str());
  }
  return ok_status();
}

Status RocrIface::host_unregister(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr) return make_error(HMR_EINVAL, "rocr host unregistration of a null pointer");
  const hsa_status_t status = symbols_.hsa_amd_memory_unlock(ptr);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status), "hsa_amd_memory_unlock(%p) failed: %s", ptr,
                      describe_hsa_status(symbols_, status).c_str());
  }
  return ok_status();
}

Result<void*> RocrIface::alloc_from_pool(hsa_amd_memory_pool_t pool, size_t len, const char* what,
                                         bool share_with_gpus) {
  void* ptr = nullptr;
  hsa_status_t status =
      symbols_.hsa_amd_memory_pool_allocate(pool, len, HSA_AMD_MEMORY_POOL_STANDARD_FLAG, &ptr);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status), "hsa_amd_memory_pool_allocate(%s, %zu) failed: %s",
                      what, len, describe_hsa_status(symbols_, status).c_str());
  }
  if (share_with_gpus) {
    std::vector<hsa_agent_t> agents;
    for (const Gpu& gpu : gpus_) agents.push_back(gpu.agent);
    status = symbols_.hsa_amd_agents_allow_access(static_cast<uint32_t>(agents.size()),
                                                  agents.data(), nullptr, ptr);
    if (status != HSA_STATUS_SUCCESS) {
      const hsa_status_t freed = symbols_.hsa_amd_memory_pool_free(ptr);
      return make_error(hmr_code_for(status), "hsa_amd_agents_allow_access(%zu GPU(s), %p) for %s "
                        "failed: %s%s%s", agents.size(), ptr, what,
                        describe_hsa_status(symbols_, status).c_str(),
                        freed == HSA_STATUS_SUCCESS
                            ? ""
                            : "; hsa_amd_memory_pool_free of the unshared allocation failed "
                              "too, so it stays allocated until the runtime shuts down: ",
                        freed == HSA_STATUS_SUCCESS ? ""
                                                    : describe_hsa_status(symbols_, freed).c_str());
    }
  }
  return ptr;
}

Result<void*> RocrIface::alloc_pinned_host(size_t len) {
  const size_t mapped = hmem::page_round(0, len, hmem::host_page_size()).length;
  void* ptr = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) {
    return make_error(HMR_ENOMEM, "rocr host allocation of %zu bytes: mmap failed", mapped);
  }
  Status locked = host_register(ptr, mapped);
  if (!locked.ok()) {
    munmap(ptr, mapped);
    return locked;
  }
  try {
    std::lock_guard lock(pinned_mutex_);
    pinned_allocations_.emplace(reinterpret_cast<uintptr_t>(ptr), mapped);
  } catch (const std::bad_alloc&) {
    // Unmapped only once unpinned: the runtime would otherwise still hold the range as
    // pinned memory, and a later mapping there would read as ROCr's.
    const hsa_status_t unlocked = symbols_.hsa_amd_memory_unlock(ptr);
    if (unlocked == HSA_STATUS_SUCCESS) munmap(ptr, mapped);
    return make_error(HMR_ENOMEM, "rocr host allocation: out of memory for its bookkeeping%s%s",
                      unlocked == HSA_STATUS_SUCCESS
                          ? ""
                          : "; hsa_amd_memory_unlock of the new allocation failed too, so it "
                            "stays pinned and mapped: ",
                      unlocked == HSA_STATUS_SUCCESS
                          ? ""
                          : describe_hsa_status(symbols_, unlocked).c_str());
  }
  return ptr;
}

Result<void*> RocrIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (len == 0) return make_error(HMR_EINVAL, "rocr allocation of 0 bytes");
  if (device.value >= gpus_.size()) {
    return make_error(HMR_EINVAL, "rocr allocation on device %" PRIu64 ", which does not exist "
                      "(this process sees %zu GPU(s))", device.value, gpus_.size());
  }
  Gpu& gpu = gpus_[device.value];
  switch (kind) {
    case MemoryKind::device_only: {
      Result<std::optional<hsa_amd_memory_pool_t>> pool =
          pool_of(gpu.vram_pool, gpu.agent, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
      if (!pool.ok()) {
        return Status(pool.status().code(), "rocr allocation on device " +
                                                std::to_string(device.value) + " (" + gpu.name +
                                                "): " + pool.status().reason());
      }
      if (!pool->has_value()) {
        return make_error(HMR_EOPNOTSUPP, "rocr device %" PRIu64 " (%s) has no coarse-grained "
                          "global memory pool that allows allocation", device.value,
                          gpu.name.c_str());
      }
      return alloc_from_pool(**pool, len, "device memory pool", false);
    }
    case MemoryKind::managed: {
      Result<std::optional<hsa_amd_memory_pool_t>> pool =
          cpu_agents_.empty() ? Result<std::optional<hsa_amd_memory_pool_t>>(
                                    std::optional<hsa_amd_memory_pool_t>())
                              : pool_of(system_pool_, cpu_agents_.front(),
                                        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
      if (!pool.ok()) {
        return Status(pool.status().code(),
                      "rocr managed allocation: " + pool.status().reason());
      }
      if (!pool->has_value()) {
        return make_error(HMR_EOPNOTSUPP, "the ROCr runtime has no fine-grained system memory "
                          "pool that allows allocation");
      }
      return alloc_from_pool(**pool, len, "system memory pool", true);
    }
    case MemoryKind::host_alloc:
      return alloc_pinned_host(len);
    case MemoryKind::host:
      break;
  }
  return make_error(HMR_EINVAL, "rocr cannot allocate memory of kind %s: it allocates "
                    "device_only, managed or host_alloc memory", hmem::memory_kind_name(kind));
}

Status RocrIface::mem_free(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr) return make_error(HMR_EINVAL, "rocr free of a null pointer");
  std::optional<size_t> pinned;
  {
    std::lock_guard lock(pinned_mutex_);
    auto found = pinned_allocations_.find(reinterpret_cast<uintptr_t>(ptr));
    if (found != pinned_allocations_.end()) pinned = found->second;
  }
  if (pinned.has_value()) {
    HMR_RETURN_IF_ERROR(host_unregister(ptr));
    {
      std::lock_guard lock(pinned_mutex_);
      pinned_allocations_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    munmap(ptr, *pinned);
    return ok_status();
  }
  const hsa_status_t status = symbols_.hsa_amd_memory_pool_free(ptr);
  if (status != HSA_STATUS_SUCCESS) {
    return make_error(hmr_code_for(status), "hsa_amd_memory_pool_free(%p) failed: %s (not an "
                      "allocation hmr's mem_alloc made?)", ptr,
                      describe_hsa_status(symbols_, status).c_str());
  }
  return ok_status();
}

Status RocrIface::watch_free(const PointerInfo& info, FreeCallback on_free, void* context) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (on_free == nullptr || info.iface != HMR_HMEM_ROCR || info.base == 0) {
    return make_error(HMR_EINVAL, "rocr free watch of base 0x%" PRIx64 " (iface %d): needs a "
                      "callback and a ROCr allocation from query()", info.base, info.iface);
  }
  // Memory ROCr reports no free of has a new identity on every query instead: nothing to watch.
  if (info.alloc_id != 0) return ok_status();
  if (watches_->add_if_registered(info.base, info.alloc_len, on_free, context)) return ok_status();
  // In the table before the runtime is asked: ROCr calls the callbacks of a free after
  // releasing its lock (Runtime::FreeMemory), so a free on another thread may call the
  // trampoline before this call returns (rocr_free_watch.h).
  const uint64_t token = watches_->add_pending(info.base, info.alloc_len, on_free, context);
  const hsa_status_t status = symbols_.hsa_amd_register_deallocation_callback(
      reinterpret_cast<void*>(static_cast<uintptr_t>(info.base)), &FreeWatchTable::trampoline,
      watches_.get());
  if (status != HSA_STATUS_SUCCESS) {
    watches_->abandon(info.base, token, context);
    return make_error(hmr_code_for(status),
                      "hsa_amd_register_deallocation_callback(0x%" PRIx64 ") failed: %s",
                      info.base, describe_hsa_status(symbols_, status).c_str());
  }
  if (!watches_->confirm(info.base, token)) {
    return make_error(HMR_EAGAIN, "rocr memory at 0x%" PRIx64 " was freed while hmr asked to be "
                      "told of its free", info.base);
  }
  return ok_status();
}

Status RocrIface::unwatch_free(const PointerInfo& info, void* context) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (info.iface != HMR_HMEM_ROCR) {
    return make_error(HMR_EINVAL, "rocr free unwatch of memory of iface %d", info.iface);
  }
  watches_->remove(info.base, context);
  return ok_status();
}

}  // namespace hmr::rocr
