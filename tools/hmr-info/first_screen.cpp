#include "first_screen.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "line_width.h"
#include "report_reading.h"

namespace hmr::info {
namespace {

// Providers made for RDMA hardware first, then the portable ones a newcomer can try anywhere
// (tcp between hosts, shm within one); the rest keep libfabric's order after these.
constexpr const char* kProviderPreference[] = {"efa", "verbs", "cxi", "psm3", "opx",
                                               "psm2", "ucx", "tcp", "shm"};

size_t preference(const std::string& provider) {
  const auto* found = std::find(std::begin(kProviderPreference), std::end(kProviderPreference),
                                provider);
  return static_cast<size_t>(found - std::begin(kProviderPreference));
}

// "a", "a or b", "a, b or c".
std::string either(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += names[i];
  }
  return text;
}

struct OfiChoice {
  std::string provider;     // the name to pass ("tcp")
  std::string resolves_to;  // what libfabric serves it as ("tcp;ofi_rxm")
};

// The provider names hmr's ofi NIC opens, each once, in order of preference.
std::vector<OfiChoice> ofi_choices(const JsonValue& report) {
  constexpr std::string_view kPrefix = "provider=";
  std::vector<OfiChoice> choices;
  for (const JsonValue& provider : items_at(report, "nics.libfabric.providers")) {
    const std::string& use = text_at(provider, "use");
    if (!bool_at(provider, "rma.supported") || use.rfind(kPrefix, 0) != 0) continue;
    OfiChoice choice{use.substr(kPrefix.size()), text_at(provider, "resolves_to")};
    const bool seen = std::any_of(choices.begin(), choices.end(), [&](const OfiChoice& c) {
      return c.provider == choice.provider;
    });
    if (!seen) choices.push_back(std::move(choice));
  }
  std::stable_sort(choices.begin(), choices.end(), [](const OfiChoice& a, const OfiChoice& b) {
    return preference(a.provider) < preference(b.provider);
  });
  return choices;
}

bool sim_opens(const JsonValue& report) {
  const JsonValue* operations = report.at("nics.sim.operations");
  if (operations == nullptr || !operations->is_object()) return false;
  return std::any_of(operations->items().begin(), operations->items().end(),
                     [](const JsonValue& op) { return bool_at(op, "supported"); });
}

struct Missing {
  std::string what, why, fix;
};

struct Screen {
  std::string use;
  std::vector<std::string> pass;
  std::string memory, cache, settings;
  std::vector<Missing> missing;
};

void describe_nics(const JsonValue& report, Screen& screen) {
  std::vector<std::string> use;
  const std::vector<JsonValue>& verbs = items_at(report, "nics.verbs.devices");
  if (!verbs.empty()) {
    const std::string& device = text_at(verbs.front(), "name");
    use.push_back("nic=verbs (device " + device + ")");
    screen.pass.push_back("attr.nic = \"verbs\", attr.nic_options = \"device=" + device + "\"");
  }
  const std::vector<OfiChoice> ofi = ofi_choices(report);
  if (!ofi.empty()) {
    // Two names are enough to choose from; --full lists every provider's answer.
    std::vector<std::string> names;
    for (size_t i = 0; i < ofi.size() && i < 2; ++i) names.push_back(ofi[i].provider);
    use.push_back("nic=ofi with provider " + either(names));
    std::string pass = "attr.nic = \"ofi\", attr.nic_options = \"provider=" +
                       ofi.front().provider + "\"";
    if (!ofi.front().resolves_to.empty() && ofi.front().resolves_to != ofi.front().provider) {
      pass += " (libfabric serves it as " + ofi.front().resolves_to + ")";
    }
    screen.pass.push_back(pass);
  }
  if (sim_opens(report)) {
    use.push_back("nic=sim (hmr's software NIC, to try hmr out)");
    screen.pass.push_back("attr.nic = \"sim\" (no options; hmr_ep_* endpoints move the bytes)");
  }
  if (!bool_at(report, "config.environment.supported")) {
    screen.use = "nothing until the setting below is fixed: hmr_domain_open refuses it";
    screen.pass.clear();
    return;
  }
  if (use.size() > 1) use.back() = "or " + use.back();
  screen.use = use.empty() ? std::string("no NIC opens (see Missing)") : join(use, ", ");
}

void describe_memory(const JsonValue& report, Screen& screen) {
  std::vector<std::string> with_devices, without_devices, not_loaded;
  for (const JsonValue& iface : items_at(report, "ifaces")) {
    const std::string& name = text_at(iface, "name");
    if (name == "system") continue;
    if (!bool_at(iface, "loaded")) {
      not_loaded.push_back(name);
      continue;
    }
    size_t count = 0, dmabuf = 0;
    for (const JsonValue& device : items_at(report, "devices")) {
      if (text_at(device, "iface") != name) continue;
      ++count;
      dmabuf += bool_at(device, "dmabuf.supported") ? 1 : 0;
    }
    if (count == 0) {
      without_devices.push_back(name);
    } else {
      with_devices.push_back(name + " (" + std::to_string(count) + " device(s), dma-buf on " +
                             std::to_string(dmabuf) + ")");
    }
  }
  if (!with_devices.empty()) {
    screen.memory = "host, " + join(with_devices, ", ");
    return;
  }
  if (!without_devices.empty()) {
    screen.memory = "host only: " + join(without_devices, ", ") + " loads but sees no device";
    screen.missing.push_back({"GPU memory", join(without_devices, ", ") +
                                                " loads but sees no device",
                              "check that the driver sees the GPU (nvidia-smi, rocminfo, ...) "
                              "and, in a container, that the device was passed in"});
    return;
  }
  screen.memory = "host only: no GPU runtime loads";
  screen.missing.push_back(
      {"GPU memory", "no GPU runtime loads (" + join(not_loaded, ", ") + ")",
       "on a GPU machine, install the vendor's driver, or set HMR_<VENDOR>_LIBRARY (e.g. "
       "HMR_CUDA_LIBRARY) to the runtime's path; --full says why each did not load"});
}

void describe_missing_nics(const JsonValue& report, Screen& screen) {
  const bool ofi_works = !ofi_choices(report).empty();
  if (items_at(report, "nics.verbs.devices").empty()) {
    Missing rdma{"RDMA device (nic=verbs)", "", ""};
    if (!bool_at(report, "nics.verbs.loaded")) {
      rdma.why = "libibverbs does not load (" + text_at(report, "nics.verbs.library") + ")";
      rdma.fix = "install rdma-core's libibverbs (Debian: libibverbs1), or set "
                 "HMR_IBVERBS_LIBRARY to its path";
    } else if (!bool_at(report, "nics.rdma_modules.ib_uverbs") ||
               !bool_at(report, "nics.rdma_modules.ib_core")) {
      rdma.why = "this kernel has no RDMA support loaded (no ib_core/ib_uverbs modules)";
      rdma.fix = ofi_works ? "here, use nic=ofi with provider " + ofi_choices(report).front().provider +
                                 "; nic=verbs needs a host with an RDMA NIC and its driver"
                           : "run on a host with an RDMA NIC and its kernel driver";
    } else {
      rdma.why = "libibverbs lists no RDMA device";
      rdma.fix = "load the NIC's kernel driver (e.g. modprobe mlx5_ib) and check that "
                 "/sys/class/infiniband lists it";
    }
    screen.missing.push_back(std::move(rdma));
  }
  if (report.at("nics.libfabric") == nullptr) return;
  if (!bool_at(report, "nics.libfabric.loaded")) {
    screen.missing.push_back({"libfabric (nic=ofi)",
                              "libfabric does not load (" +
                                  text_at(report, "nics.libfabric.library") + ")",
                              "install libfabric (Debian: libfabric1), or set HMR_OFI_LIBRARY "
                              "to its path"});
  } else if (!ofi_works) {
    screen.missing.push_back({"libfabric (nic=ofi)",
                              "no provider offers RMA on reliable-datagram endpoints to hmr",
                              "check FI_PROVIDER, which limits the providers libfabric loads; "
                              "--full gives each provider's answer"});
  }
}

void describe_cache_and_settings(const JsonValue& report, Screen& screen) {
  const bool parses = bool_at(report, "config.environment.supported");
  const JsonValue* chosen = report.at("monitors.chosen");
  const std::string monitor = chosen != nullptr ? text_at(*chosen, "name") : std::string();
  if (!monitor.empty()) {
    screen.cache = monitor + (text_at(*chosen, "source") == "default"
                                  ? " (the default here)"
                                  : " (from " + text_at(*chosen, "source") + ")");
  } else if (const std::string limit = chosen != nullptr ? text_at(*chosen, "source") : "";
             limit == "FI_MR_CACHE_MAX_COUNT" || limit == "FI_MR_CACHE_MAX_SIZE") {
    screen.cache = "none: " + limit + "=0 turns the registration cache off";
    screen.missing.push_back({"registration cache", limit + " is 0, which turns it off",
                              "unset " + limit + " (or set it above 0) to cache registrations"});
  } else if (!parses) {
    screen.cache = "none: no domain opens until the setting below is fixed";
  } else {
    screen.cache = "none: registrations are not cached";
    if (chosen != nullptr) {
      screen.missing.push_back({"registration cache", text_at(*chosen, "reason"),
                                "set FI_MR_CACHE_MONITOR to a monitor that starts here (--full: "
                                "why each did not)"});
    }
  }
  const JsonValue* set = report.at("config.set");
  const size_t given = set != nullptr && set->is_object() ? set->keys().size() : 0;
  const std::vector<JsonValue>& errors = items_at(report, "config.errors");
  if (errors.empty()) {
    screen.settings = "every variable hmr reads parses; " +
                      (given == 0 ? std::string("none is set")
                                  : std::to_string(given) + " set (--full lists them)");
    return;
  }
  screen.settings = parses ? "hmr_domain_open accepts the environment, but " +
                               std::to_string(errors.size()) + " value(s) are wrong (below)"
                           : "hmr_domain_open refuses the environment (below)";
  for (const JsonValue& error : errors) {
    screen.missing.push_back({"setting", error.as_string(),
                              "correct or unset that variable (docs/environment.md gives the "
                              "values)"});
  }
}

void add_wrapped(JsonValue& lines, std::string_view text, std::string_view first_indent,
                 std::string_view indent) {
  for (std::string& line : wrap(text, kScreenWidth, first_indent, indent)) {
    lines.push(std::move(line));
  }
}

JsonValue screen_lines(const JsonValue& report, const Screen& screen) {
  JsonValue lines = JsonValue::array();
  add_wrapped(lines,
              "hmr " + text_at(report, "hmr.version") +
                  " on this machine (hmr-info --full: the whole report; --json: as JSON)",
              "", "  ");
  constexpr std::string_view kIndent = "            ";  // under the values below
  add_wrapped(lines, screen.use, "  Use:      ", kIndent);
  for (size_t i = 0; i < screen.pass.size(); ++i) {
    add_wrapped(lines, screen.pass[i], i == 0 ? "  Pass:     " : kIndent, kIndent);
  }
  add_wrapped(lines, screen.memory, "  Memory:   ", kIndent);
  add_wrapped(lines, screen.cache, "  Cache:    ", kIndent);
  add_wrapped(lines, screen.settings, "  Settings: ", kIndent);
  if (screen.missing.empty()) {
    lines.push("Missing: nothing hmr-info can see");
    return lines;
  }
  lines.push("Missing, and what to do");
  for (const Missing& missing : screen.missing) {
    add_wrapped(lines, missing.what + ": " + missing.why, "  ", "    ");
    add_wrapped(lines, "-> " + missing.fix, "    ", "       ");
  }
  return lines;
}

}  // namespace

JsonValue first_screen(const JsonValue& report) {
  Screen screen;
  describe_nics(report, screen);
  describe_memory(report, screen);
  describe_missing_nics(report, screen);
  describe_cache_and_settings(report, screen);

  JsonValue summary = JsonValue::object();
  summary.set("use", screen.use);
  JsonValue& pass = summary.set("pass", JsonValue::array());
  for (const std::string& item : screen.pass) pass.push(item);
  summary.set("memory", screen.memory);
  summary.set("cache", screen.cache);
  summary.set("settings", screen.settings);
  JsonValue& missing = summary.set("missing", JsonValue::array());
  for (const Missing& item : screen.missing) {
    JsonValue entry = JsonValue::object();
    entry.set("what", item.what);
    entry.set("why", item.why);
    entry.set("fix", item.fix);
    missing.push(std::move(entry));
  }
  summary.set("lines", screen_lines(report, screen));
  return summary;
}

std::string render_first_screen(const JsonValue& report) {
  std::string text;
  const JsonValue* summary = report.find("summary");
  const JsonValue computed = summary == nullptr ? first_screen(report) : JsonValue();
  for (const JsonValue& line : items_at(summary != nullptr ? *summary : computed, "lines")) {
    text += line.as_string();
    text += '\n';
  }
  return text;
}

}  // namespace hmr::info
