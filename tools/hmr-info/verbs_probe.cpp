#include "verbs_probe.h"

#include "answer.h"
#include "hmem/symbol_table.h"
#include "nic/verbs/device_probe.h"
#include "nic/verbs/fork_protection.h"
#include "nic/verbs/ibverbs_library.h"

namespace hmr::info {
namespace {

JsonValue support_json(const verbs::Support& support) {
  return answer(support.supported, support.reason);
}

JsonValue device_json(const verbs::DeviceProbe& probe) {
  JsonValue device = JsonValue::object();
  device.set("name", probe.name);
  device.set("max_mr_size", probe.max_mr_size);
  device.set("max_mr", probe.max_mr);
  device.set("max_mw", probe.max_mw);
  device.set("atomics", probe.atomics);
  device.set("dmabuf", support_json(probe.dmabuf));
  device.set("peer_direct", support_json(probe.peer_direct));
  device.set("on_demand_paging", support_json(probe.on_demand_paging));
  device.set("relaxed_ordering", support_json(probe.relaxed_ordering));
  device.set("offset_addressing", support_json(probe.offset_addressing));
  device.set("window_type1", support_json(probe.window_type1));
  device.set("window_type2", support_json(probe.window_type2));
  return device;
}

}  // namespace

JsonValue verbs_json() {
  JsonValue section = JsonValue::object();
  Result<std::shared_ptr<const verbs::IbverbsLibrary>> library = verbs::IbverbsLibrary::load();
  if (!library.ok()) {
    section.set("library",
                hmem::resolve_library_path(verbs::kIbverbsVendor, verbs::kIbverbsSoname));
    section.set("loaded", false);
    section.set("reason", library.status().reason());
    section.set("devices", JsonValue::array());
    return section;
  }
  section.set("library", (*library)->path());
  section.set("loaded", true);

  // The peer-memory hints come from the real sysfs ("" is /).
  Result<std::vector<verbs::DeviceProbe>> probes = verbs::probe_all_devices(*library, "");
  section.set("reason", probes.ok() ? JsonValue() : JsonValue(probes.status().reason()));
  JsonValue& devices = section.set("devices", JsonValue::array());
  if (probes.ok()) {
    for (const verbs::DeviceProbe& probe : *probes) devices.push(device_json(probe));
  }
  // fork() and pinned pages: what hmr's first verbs domain does with nic_options fork=auto
  // (nothing where there is no device to open).
  const verbs::ForkProtection fork =
      probes.ok() && !probes->empty()
          ? verbs::preview_fork_protection((*library)->symbols(), verbs::ForkPolicy::automatic)
          : verbs::ForkProtection{"no device", "no RDMA device here: hmr decides when a verbs "
                                               "domain finds one"};
  JsonValue& fork_json = section.set("fork_protection", JsonValue::object());
  fork_json.set("state", fork.state);
  fork_json.set("reason", fork.reason);
  return section;
}

}  // namespace hmr::info
