#include "summary.h"

#include <utility>

#include "report_reading.h"

namespace hmr::info {
namespace {

std::string devices_line(const JsonValue& report) {
  const std::vector<JsonValue>& devices = items_at(report, "devices");
  std::vector<std::string> loaded_without_devices;
  std::vector<std::string> not_loaded;
  std::vector<std::string> with_devices;
  for (const JsonValue& iface : items_at(report, "ifaces")) {
    const std::string& name = text_at(iface, "name");
    if (name == "system") continue;
    if (!bool_at(iface, "loaded")) {
      not_loaded.push_back(name + ": " + text_at(iface, "reason"));
      continue;
    }
    size_t count = 0, dmabuf = 0, direct = 0;
    for (const JsonValue& device : devices) {
      if (text_at(device, "iface") != name) continue;
      ++count;
      dmabuf += bool_at(device, "dmabuf.supported") ? 1 : 0;
      direct += bool_at(device, "p2p.supported") ? 1 : 0;
    }
    if (count == 0) {
      loaded_without_devices.push_back(name);
      continue;
    }
    const std::string& version = text_at(iface, "version");
    with_devices.push_back(name + ": " + std::to_string(count) + " device(s) (" +
                           text_at(iface, "library") +
                           (version.empty() ? "" : ", version " + version) + "); dma-buf export on " +
                           std::to_string(dmabuf) + ", direct NIC access (P2P) on " +
                           std::to_string(direct));
  }
  if (!with_devices.empty()) return "Devices: " + join(with_devices, "; ");
  std::string line = "No GPU: ";
  if (!loaded_without_devices.empty()) {
    line += "the loaded runtime(s) " + join(loaded_without_devices, ", ") + " see no device";
    if (!not_loaded.empty()) line += "; not loaded:";
  } else {
    line += "no device runtime is loaded:";
  }
  // One runtime per line: each reason is a sentence of its own.
  for (const std::string& why : not_loaded) line += "\n  " + why;
  return line;
}

std::string rdma_line(const JsonValue& report) {
  const JsonValue* verbs = report.at("nics.verbs");
  if (verbs == nullptr) return "No RDMA device: not probed";
  std::vector<std::string> devices;
  for (const JsonValue& device : items_at(*verbs, "devices")) {
    devices.push_back(text_at(device, "name") + " (dma-buf import " +
                      (bool_at(device, "dmabuf.supported") ? "yes" : "no") + ", peer-direct " +
                      (bool_at(device, "peer_direct.supported") ? "yes" : "no") + ", ODP " +
                      (bool_at(device, "on_demand_paging.supported") ? "yes" : "no") + ")");
  }
  if (!devices.empty()) {
    return "RDMA: " + std::to_string(devices.size()) + " device(s) through " +
           text_at(*verbs, "library") + ": " + join(devices, ", ");
  }
  std::string why = text_at(*verbs, "reason");
  if (!bool_at(*verbs, "loaded")) why = "libibverbs is not loaded: " + why;
  // The verbs adapter's reason opens with "no RDMA devices: "; the line already says so.
  constexpr std::string_view kPrefix = "no RDMA devices: ";
  if (why.rfind(kPrefix, 0) == 0) why.erase(0, kPrefix.size());
  if (!bool_at(report, "nics.rdma_modules.ib_uverbs") ||
      !bool_at(report, "nics.rdma_modules.ib_core")) {
    why += " (no RDMA kernel support: " + text_at(report, "nics.rdma_modules.evidence") + ")";
  }
  return "No RDMA device: " + why;
}

std::string libfabric_line(const JsonValue& report) {
  const JsonValue* fabric = report.at("nics.libfabric");
  if (fabric == nullptr) return "libfabric: not probed";
  if (!bool_at(*fabric, "loaded")) return "libfabric: not loaded: " + text_at(*fabric, "reason");
  std::vector<std::string> all, rma;
  for (const JsonValue& provider : items_at(*fabric, "providers")) {
    const std::string& name = text_at(provider, "name");
    bool seen = false;
    for (const std::string& present : all) seen = seen || present == name;
    if (!seen) all.push_back(name);
    // By the name to pass, once: "tcp" and "tcp;ofi_rxm" reach the same provider.
    const JsonValue* use = provider.find("use");
    if (bool_at(provider, "rma.supported") && use != nullptr && use->is_string()) {
      const std::string& served = text_at(provider, "resolves_to");
      const std::string item = use->as_string() + (served.empty() || "provider=" + served ==
                                                       use->as_string()
                                                       ? ""
                                                       : " (as " + served + ")");
      bool listed = false;
      for (const std::string& present : rma) listed = listed || present == item;
      if (!listed) rma.push_back(item);
    }
  }
  std::string line = "libfabric " + text_at(*fabric, "version") + " (" +
                     text_at(*fabric, "library") + "): ";
  if (all.empty()) return line + "no provider: " + text_at(*fabric, "reason");
  return line + "providers " + join(all, ", ") + "; RMA for hmr: " +
         (rma.empty() ? std::string("none") : join(rma, ", "));
}

// The memory operations of one NIC in words: "all", "none", "all but X" or "X, Y".
std::string operations_text(const JsonValue* operations) {
  static constexpr std::pair<const char*, const char*> kWords[] = {
      {"rereg", "rereg"},   {"memory_windows", "windows"}, {"odp", "ODP"},
      {"implicit_odp", "implicit ODP"}, {"advise", "advise"}, {"indirect", "indirect keys"}};
  if (operations == nullptr) return "not asked";
  std::vector<std::string> present, missing;
  for (const auto& [key, words] : kWords) {
    (bool_at(*operations, std::string(key) + ".supported") ? present : missing).push_back(words);
  }
  if (missing.empty()) return "all";
  if (present.empty()) return "none";
  if (present.size() > missing.size()) return "all but " + join(missing, ", ");
  return join(present, ", ");
}

// Which of hmr's memory operations (rereg, windows, ODP, advice, indirect keys) each NIC has.
std::string operations_line(const JsonValue& report) {
  std::vector<std::string> nics;
  for (const char* adapter : {"sim", "callback"}) {
    const JsonValue* entry = report.at(std::string("nics.") + adapter);
    if (entry == nullptr) continue;
    nics.push_back(std::string(adapter) + ": " + operations_text(entry->find("operations")));
  }
  for (const JsonValue& device : items_at(report, "nics.verbs.devices")) {
    nics.push_back("verbs " + text_at(device, "name") + ": " +
                   operations_text(device.find("operations")));
  }
  // libfabric lists many providers, and hmr's ofi NIC usually answers the same for each.
  std::vector<std::string> providers, texts;
  for (const JsonValue& provider : items_at(report, "nics.libfabric.providers")) {
    providers.push_back(text_at(provider, "name"));
    texts.push_back(operations_text(provider.find("operations")));
  }
  bool same = true;
  for (const std::string& text : texts) same = same && text == texts.front();
  if (!texts.empty() && same) {
    nics.push_back("ofi (every provider): " + texts.front());
  } else {
    for (size_t i = 0; i < texts.size(); ++i) {
      nics.push_back("ofi " + providers[i] + ": " + texts[i]);
    }
  }
  return "Memory operations: " + join(nics, "; ");
}

}  // namespace

std::vector<std::string> summary_lines(const JsonValue& report) {
  std::vector<std::string> lines;
  for (const JsonValue& error : items_at(report, "config.errors")) {
    lines.push_back("Configuration error: " + error.as_string());
  }
  lines.push_back(devices_line(report));
  lines.push_back(rdma_line(report));
  lines.push_back(libfabric_line(report));
  if (report.at("nics.sim") != nullptr) lines.push_back(operations_line(report));
  if (bool_at(report, "config.effective.FI_HMEM_DISABLE_P2P")) {
    lines.push_back("FI_HMEM_DISABLE_P2P is set: NICs never access device memory directly");
  }
  const JsonValue* chosen = report.at("monitors.chosen");
  if (chosen != nullptr) {
    const JsonValue* name = chosen->find("name");
    lines.push_back("Host registration cache: " +
                    (name != nullptr && name->is_string()
                         ? name->as_string() + " (" + text_at(*chosen, "source") + "): "
                         : std::string()) +
                    text_at(*chosen, "reason"));
  }
  if (report.at("monitors.under_pressure") != nullptr) {
    lines.push_back("Under pressure: " + text_at(*report.at("monitors.under_pressure"), "reason"));
  }
  return lines;
}

}  // namespace hmr::info
