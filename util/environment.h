// Process environment, read in one place with one meaning per variable.
#pragma once

#include <hmr/hmr.h>

#include <array>

#include "util/status.h"

namespace hmr::core {

// A boolean variable: 1/0, yes/no, true/false, on/off (any case); unset gives the default.
// Anything else is an error naming the variable, never a silent guess.
Result<bool> env_bool(const char* name, bool default_value);

// An unsigned integer variable; unset gives `default_value`.
Result<uint64_t> env_unsigned(const char* name, uint64_t default_value);

struct Environment {
  bool disable_p2p = false;  // FI_HMEM_DISABLE_P2P: the NIC must never DMA device memory
  // FI_HMEM_<VENDOR>_USE_DMABUF, indexed by enum hmr_hmem_iface (system unused): whether
  // device memory of that iface may reach the NIC as a dma-buf.  Default yes.
  std::array<bool, HMR_HMEM_IFACE_COUNT> use_dmabuf{true, true, true, true, true, true};
  // FI_MR_{CUDA,ROCR,ZE}_CACHE_MONITOR_ENABLED, indexed likewise: whether registrations of
  // that iface's memory are cached.  Neuron and SynapseAI have no variable (they are cached,
  // with explicit invalidation as their monitor).  Default yes.
  std::array<bool, HMR_HMEM_IFACE_COUNT> device_cache{true, true, true, true, true, true};
  // HMR_CUDA_FREES_REPORTED: the application reports every free of CUDA memory it registered
  // (hmr_mem_invalidate or hmr_mem_free before the memory goes), so a cached hit of CUDA
  // memory may be served without asking the driver (core/recent_device_ranges.h).  Default no:
  // each hit asks for the allocation's identity once.
  bool cuda_frees_reported = false;
  // Registration cache defaults for domains that do not set their own.
  uint64_t cache_max_count = 1024;       // FI_MR_CACHE_MAX_COUNT (0 disables caching)
  uint64_t cache_max_size = 0;           // FI_MR_CACHE_MAX_SIZE (0 disables caching)
  // FI_MR_CACHE_MONITOR; "default" is memhooks, else userfaultfd, else no cache
  // (monitor/monitor_registry.h says why).
  const char* cache_monitor = "default";
  bool cache_monitor_from_environment = false;
  // Large host registrations (core/prefault.h): ranges of at least this many bytes are
  // pre-faulted before the NIC pins them (HMR_REG_PREFAULT_MIN; default 64 MiB) by this many
  // threads, the caller included (HMR_REG_THREADS; default min(4, hardware threads)).
  uint64_t reg_prefault_min = 64ULL << 20;
  uint64_t reg_threads = 1;
};
// Read at every hmr_domain_open: each domain works under the values in force when it opened.
Result<Environment> read_environment();

}  // namespace hmr::core
