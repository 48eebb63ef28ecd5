#include "config_probe.h"

#include <cstdlib>
#include <string>

#include "answer.h"
#include "hmem/hmem_registry.h"
#include "hmem/iface_factory.h"
#include "hmem/symbol_table.h"
#include "nic/verbs/verbs_symbols.h"
#include "synapseai/synapseai_iface.h"
#include "util/log.h"

#if defined(HMR_HAVE_OFI)
#include "nic/ofi/ofi_library.h"
#endif

namespace hmr::info {
namespace {

struct Collector {
  JsonValue effective = JsonValue::object();
  JsonValue set = JsonValue::object();
  JsonValue errors = JsonValue::array();

  // Records what the environment holds for `name`; true when it is set.
  bool note(const char* name) {
    const char* raw = std::getenv(name);
    if (raw == nullptr) return false;
    set.set(name, raw);
    return true;
  }
  void add_bool(const char* name, bool default_value) {
    note(name);
    Result<bool> value = core::env_bool(name, default_value);
    if (value.ok()) {
      effective.set(name, *value);
    } else {
      effective.set(name, JsonValue());
      errors.push(value.status().reason());
    }
  }
  void add_unsigned(const char* name, JsonValue default_value) {
    const bool given = note(name);
    Result<uint64_t> value = core::env_unsigned(name, 0);
    if (!value.ok()) {
      effective.set(name, JsonValue());
      errors.push(value.status().reason());
    } else {
      effective.set(name, given && *std::getenv(name) != '\0' ? JsonValue(*value)
                                                               : std::move(default_value));
    }
  }
  void add_library(const char* vendor, const char* default_library) {
    const std::string variable = hmem::library_override_variable(vendor);
    note(variable.c_str());
    effective.set(variable, hmem::resolve_library_path(vendor, default_library));
  }
};

std::string iface_list_text() {
  Result<hmem::IfaceSelection> selection = hmem::read_hmem_selection();
  if (!selection.ok()) return {};
  std::string names = "system";
  for (int iface : selection->detection_order) names += std::string(",") + hmem::iface_name(iface);
  return names;
}

const char* log_level_text() {
  if (log_enabled(LogLevel::debug)) return "debug";
  if (log_enabled(LogLevel::info)) return "info";
  if (log_enabled(LogLevel::warn)) return "warn";
  return "error";
}

}  // namespace

JsonValue config_section(const Result<core::Environment>& environment) {
  Collector config;

  config.note("FI_HMEM");
  Result<hmem::IfaceSelection> selection = hmem::read_hmem_selection();
  if (selection.ok()) {
    config.effective.set("FI_HMEM", iface_list_text());
  } else {
    config.effective.set("FI_HMEM", JsonValue());
    config.errors.push(selection.status().reason());
  }
  config.add_bool("FI_HMEM_DISABLE_P2P", false);
  for (const char* name : {"FI_HMEM_CUDA_USE_DMABUF", "FI_HMEM_ROCR_USE_DMABUF",
                           "FI_HMEM_ZE_USE_DMABUF", "FI_HMEM_NEURON_USE_DMABUF",
                           "FI_HMEM_SYNAPSEAI_USE_DMABUF"}) {
    config.add_bool(name, true);
  }
  config.add_unsigned("FI_MR_CACHE_MAX_COUNT", JsonValue(1024));
  // Its default depends on the machine (memory per CPU); environment has it when it parsed.
  config.add_unsigned("FI_MR_CACHE_MAX_SIZE",
                      environment.ok() ? JsonValue(environment.value().cache_max_size)
                                       : JsonValue("physical memory / online CPUs"));
  config.note("FI_MR_CACHE_MONITOR");
  const char* monitor = std::getenv("FI_MR_CACHE_MONITOR");
  config.effective.set("FI_MR_CACHE_MONITOR",
                       monitor != nullptr && *monitor != '\0' ? monitor : "default");
  for (const char* name : {"FI_MR_CUDA_CACHE_MONITOR_ENABLED", "FI_MR_ROCR_CACHE_MONITOR_ENABLED",
                           "FI_MR_ZE_CACHE_MONITOR_ENABLED"}) {
    config.add_bool(name, true);
  }
  config.note("HMR_LOG_LEVEL");
  config.effective.set("HMR_LOG_LEVEL", log_level_text());
  for (const hmem::IfaceDescriptor& descriptor : hmem::builtin_ifaces()) {
    config.add_library(descriptor.vendor, descriptor.default_library);
  }
  config.add_library("HLTHUNK", synapseai::kHlthunkDefaultLibrary);
  config.add_library(verbs::kIbverbsVendor, verbs::kIbverbsSoname);
#if defined(HMR_HAVE_OFI)
  config.add_library(nic::ofi::kOfiVendor, nic::ofi::kOfiDefaultLibrary);
#endif

  JsonValue section = JsonValue::object();
  const bool parses = environment.ok() && selection.ok();
  const Status& first_error = !selection.ok() ? selection.status() : environment.status();
  section.set("environment",
              answer(parses, parses ? std::string("every variable parses")
                                    : "hmr_domain_open fails: " + first_error.reason()));
  section.set("effective", std::move(config.effective));
  section.set("set", std::move(config.set));
  section.set("errors", std::move(config.errors));
  return section;
}

}  // namespace hmr::info
