#include "report.h"

#include <hmr/hmr.h>

#include <string>

#include "config_probe.h"
#include "first_screen.h"
#include "hmem/hmem_registry.h"
#include "iface_probe.h"
#include "monitor_probe.h"
#include "nic_section.h"
#include "util/environment.h"

namespace hmr::info {
namespace {

std::string version_text(uint32_t version) {
  return std::to_string(version >> 16) + "." + std::to_string((version >> 8) & 0xffu) + "." +
         std::to_string(version & 0xffu);
}

}  // namespace

JsonValue build_report() {
  JsonValue report = JsonValue::object();
  JsonValue& about = report.set("hmr", JsonValue::object());
  about.set("version", version_text(hmr_version()));
  about.set("headers", std::to_string(HMR_VERSION_MAJOR) + "." + std::to_string(HMR_VERSION_MINOR) +
                         "." + std::to_string(HMR_VERSION_PATCH));

  const Result<core::Environment> environment = core::read_environment();
  const std::vector<hmem::IfaceReport> ifaces = hmem::Registry::global().describe();
  report.set("ifaces", ifaces_section(ifaces));
  report.set("devices", devices_section(ifaces, environment));
  report.set("nics", nics_section());
  const JsonValue& monitors = report.set("monitors", monitors_section(ifaces, environment));
  // A monitor setting hmr_domain_open fails on is the config section's error too.
  const JsonValue* refused = monitors.at("chosen.refusal");
  const std::string refusal = refused != nullptr && refused->is_string() ? refused->as_string() : "";
  report.set("config", config_section(environment, refusal));
  // The first screen reads the finished tree; it goes right after "hmr", where a reader of
  // --json looks first.
  JsonValue ordered = JsonValue::object();
  for (size_t i = 0; i < report.keys().size(); ++i) {
    ordered.set(report.keys()[i], report.items()[i]);
    if (report.keys()[i] == "hmr") ordered.set("summary", first_screen(report));
  }
  return ordered;
}

}  // namespace hmr::info
