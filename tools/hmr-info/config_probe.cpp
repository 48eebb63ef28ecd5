#include "config_probe.h"

#include <strings.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "answer.h"
#include "hmem/hmem_registry.h"
#include "hmem/iface_factory.h"
#include "hmem/symbol_table.h"
#include "nic/verbs/mlx5dv_library.h"
#include "nic/verbs/verbs_symbols.h"
#include "synapseai/synapseai_iface.h"
#include "util/environment_variables.h"
#include "util/log.h"

#if defined(HMR_HAVE_OFI)
#include "nic/ofi/ofi_library.h"
#endif

namespace hmr::info {
namespace {

using core::EnvironmentVariable;
using core::VariableKind;
using core::VariableReader;

// A default given in words reads as a number in the JSON when it is one ("1024").
JsonValue default_json(const char* text) {
  const std::string value = text;
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    return JsonValue(std::stoull(value));
  }
  return JsonValue(value);
}

struct Collector {
  JsonValue effective = JsonValue::object();
  JsonValue set = JsonValue::object();
  JsonValue errors = JsonValue::array();
  JsonValue plugin = JsonValue::object();

  void error(const std::string& reason) {
    for (const JsonValue& present : errors.items()) {
      if (present.as_string() == reason) return;
    }
    errors.push(reason);
  }
  void add_bool(const EnvironmentVariable& variable) {
    const bool default_value = std::string_view(variable.default_value) == "1";
    Result<bool> value = core::env_bool(variable.name, default_value);
    if (value.ok()) {
      effective.set(variable.name, *value);
    } else {
      effective.set(variable.name, JsonValue());
      error(value.status().reason());
    }
  }
  void add_unsigned(const EnvironmentVariable& variable, JsonValue default_value) {
    Result<uint64_t> value = core::env_unsigned(variable.name, 0);
    const char* raw = std::getenv(variable.name);
    if (!value.ok()) {
      effective.set(variable.name, JsonValue());
      error(value.status().reason());
    } else {
      effective.set(variable.name, raw != nullptr && *raw != '\0' ? JsonValue(*value)
                                                                  : std::move(default_value));
    }
  }
};

// The soname each HMR_<VENDOR>_LIBRARY replaces, from the loaders themselves (the list's own
// default is the documentation, which the hmr_info test holds to these).
std::string default_library(const std::string& vendor, const char* documented) {
  for (const hmem::IfaceDescriptor& descriptor : hmem::builtin_ifaces()) {
    if (vendor == descriptor.vendor) return descriptor.default_library;
  }
  if (vendor == "HLTHUNK") return synapseai::kHlthunkDefaultLibrary;
  if (vendor == verbs::kIbverbsVendor) return verbs::kIbverbsSoname;
  if (vendor == verbs::kMlx5Vendor) return verbs::kMlx5Soname;
#if defined(HMR_HAVE_OFI)
  if (vendor == nic::ofi::kOfiVendor) return nic::ofi::kOfiDefaultLibrary;
#endif
  return documented;
}

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

// HMR_LOG_LEVEL is never refused (logging must not stop a program), but a value hmr ignores
// is reported as loudly as one it refuses.
void add_log_level(Collector& config) {
  config.effective.set("HMR_LOG_LEVEL", log_level_text());
  const char* raw = std::getenv("HMR_LOG_LEVEL");
  if (raw == nullptr || *raw == '\0') return;
  for (const char* known : {"error", "warn", "warning", "info", "debug"}) {
    if (strcasecmp(raw, known) == 0) return;
  }
  config.error(std::string("HMR_LOG_LEVEL='") + raw +
               "' is none of error, warn, info, debug (any case): hmr ignores it and logs at "
               "warn");
}

// What one variable of the list is worth here.  Variables with a syntax of their own are
// named; the rest are read by their kind, as hmr reads them.
void add_variable(Collector& config, const EnvironmentVariable& variable,
                  const Result<core::Environment>& environment,
                  const Result<hmem::IfaceSelection>& selection) {
  const std::string_view name = variable.name;
  if (variable.reader == VariableReader::nccl_plugin) {
    const char* raw = std::getenv(variable.name);
    config.plugin.set(name, raw != nullptr ? JsonValue(raw) : default_json(variable.default_value));
    return;
  }
  if (name == "FI_HMEM") {
    if (selection.ok()) {
      config.effective.set(name, iface_list_text());
    } else {
      config.effective.set(name, JsonValue());
      config.error(selection.status().reason());
    }
  } else if (name == "FI_MR_CACHE_MONITOR") {
    const char* monitor = std::getenv(variable.name);
    config.effective.set(name, monitor != nullptr && *monitor != '\0' ? monitor : "default");
  } else if (name == "HMR_LOG_LEVEL") {
    add_log_level(config);
  } else if (name == "HLS_MODULE_ID") {
    // SynapseAI's own variable: shown as set, or null (the host's only Gaudi device).
    const char* module = std::getenv(variable.name);
    config.effective.set(name, module != nullptr && *module != '\0' ? JsonValue(module)
                                                                      : JsonValue());
  } else if (name == "FI_MR_CACHE_MAX_SIZE") {
    // Its default depends on the machine (memory per CPU); environment has it when it parsed.
    config.add_unsigned(variable, environment.ok()
                                      ? JsonValue(environment.value().cache_max_size)
                                      : JsonValue(variable.default_value));
  } else if (name == "HMR_REG_PREFAULT_MIN") {
    config.add_unsigned(variable, environment.ok()
                                      ? JsonValue(environment.value().reg_prefault_min)
                                      : JsonValue(variable.default_value));
  } else if (name == "HMR_REG_THREADS") {
    config.add_unsigned(variable, environment.ok() ? JsonValue(environment.value().reg_threads)
                                                   : JsonValue(variable.default_value));
  } else if (variable.kind == VariableKind::boolean) {
    config.add_bool(variable);
  } else if (variable.kind == VariableKind::unsigned_number) {
    config.add_unsigned(variable, default_json(variable.default_value));
  } else if (variable.kind == VariableKind::library_path) {
    std::string vendor(name.substr(4, name.size() - 4 - 8));  // HMR_<VENDOR>_LIBRARY
    config.effective.set(name, hmem::resolve_library_path(
                                   vendor.c_str(),
                                   default_library(vendor, variable.default_value).c_str()));
  } else {
    // A variable of the list that hmr-info does not know how to read: say so rather than
    // leave it out (the hmr_info test fails on this text).
    config.effective.set(name, JsonValue());
    config.error(std::string(variable.name) + ": hmr-info does not know how to read it");
  }
}

}  // namespace

JsonValue config_section(const Result<core::Environment>& environment,
                         const std::string& monitor_refusal) {
  Collector config;
  const Result<hmem::IfaceSelection> selection = hmem::read_hmem_selection();
  JsonValue variables = JsonValue::object();
  for (const EnvironmentVariable& variable : core::environment_variables()) {
    if (const char* raw = std::getenv(variable.name); raw != nullptr) config.set.set(variable.name, raw);
    add_variable(config, variable, environment, selection);
    variables.set(variable.name, std::string(core::reader_name(variable.reader)) + ": " +
                                     variable.values + "; default " + variable.default_value +
                                     "; read " + variable.read_when);
  }
  // A refusal checked only when the whole environment is read (HMR_REG_THREADS' range).
  if (!environment.ok()) config.error(environment.status().reason());
  if (!monitor_refusal.empty()) config.error(monitor_refusal);

  JsonValue section = JsonValue::object();
  const bool accepted = environment.ok() && selection.ok() && monitor_refusal.empty();
  const std::string first_error = !selection.ok()     ? selection.status().reason()
                                  : !environment.ok() ? environment.status().reason()
                                                      : monitor_refusal;
  section.set("environment",
              answer(accepted, accepted ? std::string("hmr_domain_open accepts every variable")
                                        : "hmr_domain_open fails: " + first_error));
  section.set("effective", std::move(config.effective));
  section.set("set", std::move(config.set));
  section.set("errors", std::move(config.errors));
  section.set("nccl_plugin", std::move(config.plugin));
  section.set("variables", std::move(variables));
  return section;
}

}  // namespace hmr::info
