#include "util/environment_variables.h"

namespace hmr::core {
namespace {

using enum VariableReader;
using enum VariableKind;

constexpr const char* kBoolean = "boolean: 1/0, yes/no, true/false, on/off, y/n (any case)";
// The NCCL plugin's own reader (plugins/nccl-net/net/settings.cpp) takes the same words.
constexpr const char* kPluginBoolean = kBoolean;
constexpr const char* kDomainOpen = "at each hmr_domain_open";
constexpr const char* kRuntimeLoad = "once per process, when that library is first loaded";
constexpr const char* kPluginInit = "at the plugin's first init";

// Grouped as docs/environment.md is: the library's, then the NCCL plugin's.
constexpr EnvironmentVariable kVariables[] = {
    {"HMR_LOG_LEVEL", library, other, "error, warn, info, debug (any case)", "warn",
     "once per process, when hmr first has something to log"},
    {"FI_HMEM", library, other,
     "a list of system, cuda, rocr, ze, neuron, synapseai (',' or ';', any case), or '^' and "
     "a list to exclude",
     "every interface", "once per process, at the first call that needs the memory interfaces"},
    {"FI_HMEM_DISABLE_P2P", library, boolean, kBoolean, "0", kDomainOpen},
    {"FI_HMEM_CUDA_USE_DMABUF", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_HMEM_ROCR_USE_DMABUF", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_HMEM_ZE_USE_DMABUF", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_HMEM_NEURON_USE_DMABUF", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_HMEM_SYNAPSEAI_USE_DMABUF", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_MR_CUDA_CACHE_MONITOR_ENABLED", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_MR_ROCR_CACHE_MONITOR_ENABLED", library, boolean, kBoolean, "1", kDomainOpen},
    {"FI_MR_ZE_CACHE_MONITOR_ENABLED", library, boolean, kBoolean, "1", kDomainOpen},
    {"HMR_CUDA_FREES_REPORTED", library, boolean, kBoolean, "0", kDomainOpen},
    {"FI_MR_CACHE_MAX_COUNT", library, unsigned_number, "unsigned number (0 turns caching off)",
     "1024", kDomainOpen},
    {"FI_MR_CACHE_MAX_SIZE", library, unsigned_number,
     "unsigned number of bytes (0 turns caching off)", "physical memory / online CPUs",
     kDomainOpen},
    {"FI_MR_CACHE_MONITOR", library, other,
     "memhooks, userfaultfd, disabled, default, or an imported monitor's name", "default",
     kDomainOpen},
    {"HMR_UFFD_ASK_KERNEL", library, boolean, kBoolean, "1",
     "once, when the process's userfaultfd monitor starts"},
    {"HMR_REG_PREFAULT_MIN", library, unsigned_number, "unsigned number of bytes",
     "67108864 (64 MiB)", kDomainOpen},
    {"HMR_REG_THREADS", library, unsigned_number, "1 to 256", "min(4, hardware threads)",
     kDomainOpen},
    {"HMR_CUDA_LIBRARY", library, library_path, "a path", "libcuda.so.1", kRuntimeLoad},
    {"HMR_ROCR_LIBRARY", library, library_path, "a path", "libhsa-runtime64.so.1", kRuntimeLoad},
    {"HMR_ZE_LIBRARY", library, library_path, "a path", "libze_loader.so.1", kRuntimeLoad},
    {"HMR_NEURON_LIBRARY", library, library_path, "a path", "libnrt.so.1", kRuntimeLoad},
    {"HMR_SYNAPSEAI_LIBRARY", library, library_path, "a path", "libSynapse.so", kRuntimeLoad},
    {"HMR_HLTHUNK_LIBRARY", library, library_path, "a path", "libhl-thunk.so", kRuntimeLoad},
    {"HMR_SCAL_LIBRARY", library, library_path, "a path", "libscal.so", kRuntimeLoad},
    {"HMR_SYNAPSEAI_HCCL_DMABUF", library, boolean, kBoolean, "0", kRuntimeLoad},
    {"HLS_MODULE_ID", library, other, "a Gaudi module id (SynapseAI's own variable)",
     "unset: the host's only Gaudi device, if it has one",
     "when hmr first opens a Gaudi device for hmr_mem_alloc"},
    {"HMR_IBVERBS_LIBRARY", library, library_path, "a path", "libibverbs.so.1", kRuntimeLoad},
    {"HMR_MLX5_LIBRARY", library, library_path, "a path", "libmlx5.so.1", kRuntimeLoad},
    {"HMR_OFI_LIBRARY", library_and_plugin, library_path, "a path", "libfabric.so.1",
     kRuntimeLoad},
    {"HMR_NCCL_PROVIDER", nccl_plugin, other, "a libfabric provider name (efa, verbs, tcp, ...)",
     "the first of efa, verbs;ofi_rxm, tcp;ofi_rxm with RDM and RMA", kPluginInit},
    {"HMR_NCCL_CONNECT_TIMEOUT", nccl_plugin, other, "seconds, in (0, 86400]", "30", kPluginInit},
    {"HMR_NCCL_WRITE_TIMEOUT", nccl_plugin, other, "seconds, in (0, 86400]", "60", kPluginInit},
    {"HMR_NCCL_EAGER_MAX", nccl_plugin, other, "bytes, 0 to 65536 (0: no eager messages)", "8192",
     kPluginInit},
    {"HMR_NCCL_FORCE_FLUSH", nccl_plugin, other, kPluginBoolean, "0", kPluginInit},
    {"HMR_NCCL_IFNAME", nccl_plugin, other, "NCCL_SOCKET_IFNAME's syntax",
     "lo and docker bridges excluded unless nothing else is left", kPluginInit},
    {"HMR_NCCL_CHECK_LANDED", nccl_plugin, other, kPluginBoolean, "0", kPluginInit},
    {"HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS", nccl_plugin, other, kPluginBoolean, "0", kPluginInit},
    {"HMR_NCCL_TEST_FLUSH_EAGAIN", nccl_plugin, other, "a count, 0 to 1000000", "0",
     kPluginInit},
    {"HMR_NCCL_TEST_FLUSH_HOST_MEMORY", nccl_plugin, other, kPluginBoolean, "0", kPluginInit},
    {"HMR_NCCL_TEST_EAGER_THROUGH_NIC", nccl_plugin, other, kPluginBoolean, "0", kPluginInit},
    {"FI_OFI_RXM_MSG_RX_SIZE", nccl_plugin, other, "libfabric's",
     "set to 128 by the plugin when unset", kPluginInit},
};

}  // namespace

std::span<const EnvironmentVariable> environment_variables() { return kVariables; }

const EnvironmentVariable* find_environment_variable(std::string_view name) {
  for (const EnvironmentVariable& variable : kVariables) {
    if (name == variable.name) return &variable;
  }
  return nullptr;
}

const char* reader_name(VariableReader reader) {
  switch (reader) {
    case library: return "hmr";
    case library_and_plugin: return "hmr and the NCCL plugin";
    case nccl_plugin: return "the NCCL plugin";
  }
  return "?";
}

}  // namespace hmr::core
