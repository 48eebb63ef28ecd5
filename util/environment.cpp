#include "util/environment.h"

#include <strings.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace hmr::core {

Result<bool> env_bool(const char* name, bool default_value) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return default_value;
  for (const char* yes : {"1", "yes", "true", "on", "y"}) {
    if (strcasecmp(value, yes) == 0) return true;
  }
  for (const char* no : {"0", "no", "false", "off", "n"}) {
    if (strcasecmp(value, no) == 0) return false;
  }
  return make_error(HMR_EINVAL, "%s='%s' is not a boolean (use 1/0, yes/no, true/false, on/off)",
                    name, value);
}

Result<uint64_t> env_unsigned(const char* name, uint64_t default_value) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return default_value;
  char* end = nullptr;
  errno = 0;
  const unsigned long long number = std::strtoull(value, &end, 0);
  if (errno != 0 || *end != '\0' || value[0] == '-') {
    return make_error(HMR_EINVAL, "%s='%s' is not an unsigned number", name, value);
  }
  return static_cast<uint64_t>(number);
}

namespace {
// libfabric's default for FI_MR_CACHE_MAX_SIZE: physical memory shared among the CPUs.
uint64_t memory_per_cpu() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (pages <= 0 || page_size <= 0 || cpus <= 0) return 1ULL << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) /
         static_cast<uint64_t>(cpus);
}
}  // namespace

Result<Environment> read_environment() {
  Environment environment;
  Result<bool> disable_p2p = env_bool("FI_HMEM_DISABLE_P2P", false);
  if (!disable_p2p.ok()) return disable_p2p.status();
  environment.disable_p2p = *disable_p2p;
  static constexpr const char* kUseDmabuf[HMR_HMEM_IFACE_COUNT] = {
      nullptr, "FI_HMEM_CUDA_USE_DMABUF", "FI_HMEM_ROCR_USE_DMABUF", "FI_HMEM_ZE_USE_DMABUF",
      "FI_HMEM_NEURON_USE_DMABUF", "FI_HMEM_SYNAPSEAI_USE_DMABUF"};
  static constexpr const char* kCacheMonitor[HMR_HMEM_IFACE_COUNT] = {
      nullptr, "FI_MR_CUDA_CACHE_MONITOR_ENABLED", "FI_MR_ROCR_CACHE_MONITOR_ENABLED",
      "FI_MR_ZE_CACHE_MONITOR_ENABLED", nullptr, nullptr};
  for (size_t iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    if (kUseDmabuf[iface] != nullptr) {
      Result<bool> use = env_bool(kUseDmabuf[iface], true);
      if (!use.ok()) return use.status();
      environment.use_dmabuf[iface] = *use;
    }
    if (kCacheMonitor[iface] != nullptr) {
      Result<bool> cached = env_bool(kCacheMonitor[iface], true);
      if (!cached.ok()) return cached.status();
      environment.device_cache[iface] = *cached;
    }
  }
  Result<bool> cuda_frees_reported = env_bool("HMR_CUDA_FREES_REPORTED", false);
  if (!cuda_frees_reported.ok()) return cuda_frees_reported.status();
  environment.cuda_frees_reported = *cuda_frees_reported;
  Result<uint64_t> max_count = env_unsigned("FI_MR_CACHE_MAX_COUNT", 1024);
  if (!max_count.ok()) return max_count.status();
  environment.cache_max_count = *max_count;
  Result<uint64_t> max_size = env_unsigned("FI_MR_CACHE_MAX_SIZE", memory_per_cpu());
  if (!max_size.ok()) return max_size.status();
  environment.cache_max_size = *max_size;
  const char* monitor = std::getenv("FI_MR_CACHE_MONITOR");
  if (monitor != nullptr && *monitor != '\0') {
    environment.cache_monitor = monitor;
    environment.cache_monitor_from_environment = true;
  }
  Result<uint64_t> prefault_min = env_unsigned("HMR_REG_PREFAULT_MIN", 64ULL << 20);
  if (!prefault_min.ok()) return prefault_min.status();
  environment.reg_prefault_min = *prefault_min;
  const unsigned hardware = std::thread::hardware_concurrency();
  Result<uint64_t> threads =
      env_unsigned("HMR_REG_THREADS", std::min<uint64_t>(4, hardware != 0 ? hardware : 1));
  if (!threads.ok()) return threads.status();
  if (*threads == 0 || *threads > 256) {
    return make_error(HMR_EINVAL, "HMR_REG_THREADS=%llu: use 1 to 256",
                      static_cast<unsigned long long>(*threads));
  }
  environment.reg_threads = *threads;
  return environment;
}

}  // namespace hmr::core
