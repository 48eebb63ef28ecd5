#include "monitor_probe.h"

#include <cstring>
#include <string>

#include "answer.h"
#include "iface_probe.h"
#include "monitor/memhooks_monitor.h"
#include "monitor/monitor_registry.h"
#include "monitor/uffd_monitor.h"
#include "registration/pinned_limit.h"

namespace hmr::info {
namespace {

struct HostMonitor {
  const char* name;
  Status started;
};

JsonValue host_monitor_json(const HostMonitor& monitor, const char* how) {
  JsonValue entry = JsonValue::object();
  entry.set("name", monitor.name);
  entry.set("available", answer(monitor.started.ok(),
                                monitor.started.ok() ? std::string("started here: ") + how
                                                     : monitor.started.reason()));
  return entry;
}

// What a domain opened with no cache_monitor of its own gets, and why.
// What a domain on a NIC that pins (verbs without ODP, libfabric's verbs and efa, a callback
// with HMR_NIC_CB_PINS_HOST_MEMORY) may hold pinned, idle cached registrations included
// (docs/semantics.md, "Under pressure").
JsonValue pressure_json() {
  nic::Capabilities pinning;
  pinning.pins_host_memory = true;
  const core::PinnedLimit limit = core::pinned_limit_for(pinning);
  JsonValue pressure = JsonValue::object();
  pressure.set("max_pinned_bytes", limit.bounded ? JsonValue(limit.bytes) : JsonValue());
  pressure.set("source", limit.source);
  std::string reason =
      limit.bounded && limit.bytes == 0
          ? "RLIMIT_MEMLOCK is 0 and this process lacks CAP_IPC_LOCK: the kernel pins nothing "
            "for it, so every registration on a NIC that pins host memory is refused (raise "
            "ulimit -l)"
      : limit.bounded
          ? "a domain on a NIC that pins holds at most " + std::to_string(limit.bytes >> 10) +
                " KiB pinned (RLIMIT_MEMLOCK), idle cached registrations included; past it, "
                "and whenever the NIC refuses for resources, idle ones are given back first"
          : std::string(limit.source) == "cap_ipc_lock"
                ? "this process has CAP_IPC_LOCK: hmr bounds pinned bytes only by the NIC's own "
                  "limits; when the NIC refuses for resources, idle cached registrations are "
                  "given back first"
                : "RLIMIT_MEMLOCK is unlimited: hmr bounds pinned bytes only by the NIC's own "
                  "limits; when the NIC refuses for resources, idle cached registrations are "
                  "given back first";
  pressure.set("reason", reason);
  return pressure;
}

// The limit that turns every registration cache off (hmr_domain_open looks at the limits
// before the monitor, core/domain.cpp: open_cache), or nullptr.
const char* cache_turned_off_by(const core::Environment& environment) {
  if (environment.cache_max_count == 0) return "FI_MR_CACHE_MAX_COUNT";
  if (environment.cache_max_size == 0) return "FI_MR_CACHE_MAX_SIZE";
  return nullptr;
}

// {name, source, reason} and, when the setting makes hmr_domain_open fail, `refusal`: the
// config section counts it as an error (config_probe.h).
JsonValue chosen_json(const Result<core::Environment>& environment, const HostMonitor* monitors,
                      size_t count) {
  JsonValue chosen = JsonValue::object();
  if (!environment.ok()) {
    chosen.set("name", JsonValue());
    chosen.set("source", JsonValue());
    chosen.set("reason", "no domain opens while the environment does not parse: " +
                             environment.status().reason());
    return chosen;
  }
  const char* name = environment.value().cache_monitor;
  const bool named = environment.value().cache_monitor_from_environment;
  if (const char* limit = cache_turned_off_by(environment.value())) {
    // Whatever FI_MR_CACHE_MONITOR says: no monitor is even looked for.
    chosen.set("name", JsonValue());
    chosen.set("source", limit);
    chosen.set("reason", std::string("no registration is cached: ") + limit +
                             " is 0, which turns the cache off");
    return chosen;
  }
  chosen.set("name", name);
  chosen.set("source", named ? "FI_MR_CACHE_MONITOR" : "default");
  std::string reason;
  std::string refusal;  // why hmr_domain_open fails for this setting, when it does
  if (std::strcmp(name, core::kDefaultMonitorName) == 0) {
    // The chain a domain walks: the first that starts is the one it gets.
    const HostMonitor* first = nullptr;
    std::string refused;
    for (const char* candidate : core::kDefaultMonitorOrder) {
      for (size_t i = 0; i < count && first == nullptr; ++i) {
        if (std::strcmp(monitors[i].name, candidate) != 0) continue;
        if (monitors[i].started.ok()) {
          first = &monitors[i];
        } else {
          refused += std::string(candidate) + " cannot start (" + monitors[i].started.reason() + "); ";
        }
      }
    }
    chosen.set("name", first != nullptr ? JsonValue(first->name) : JsonValue());
    if (first == nullptr) {
      reason = refused + "so domains open without a host registration cache (hmr logs a warning)";
    } else if (std::strcmp(first->name, "memhooks") == 0) {
      reason = "it installs here, and it runs inline in the thread that unmaps, so it costs "
               "the application least (userfaultfd makes that thread wait for its monitor thread)";
    } else {
      reason = refused + "so userfaultfd, whose monitor thread the unmapping thread waits for";
    }
  } else if (std::strcmp(name, "disabled") == 0) {
    reason = "FI_MR_CACHE_MONITOR=disabled: no registration is cached";
  } else {
    const HostMonitor* known = nullptr;
    for (size_t i = 0; i < count; ++i) {
      const bool alias = std::strcmp(name, "uffd") == 0 && std::strcmp(monitors[i].name, "userfaultfd") == 0;
      if (std::strcmp(name, monitors[i].name) == 0 || alias) known = &monitors[i];
    }
    if (known == nullptr) {
      // What hmr_domain_open says, from the registry it asks (nothing is imported here).
      const Result<core::Monitor*> acquired = core::acquire_monitor(name);
      reason = std::string("'") + name + "' is not built in: a domain opens only if the "
               "application imported a monitor of that name (hmr_monitor_import)";
      if (!acquired.ok()) refusal = acquired.status().reason();
    } else if (known->started.ok()) {
      reason = "it can start here, so host registrations are cached";
    } else if (named) {
      reason = "FI_MR_CACHE_MONITOR names it but it cannot start here, so hmr_domain_open "
               "fails: " + known->started.reason();
      refusal = "it cannot start here: " + known->started.reason();
    } else {
      reason = "it cannot start here, so domains open without a host registration cache "
               "(hmr logs a warning): " + known->started.reason();
    }
  }
  chosen.set("reason", reason);
  if (!refusal.empty()) {
    // hmr_domain_open fails: no domain gets a monitor, and the setting is an error.
    chosen.set("name", JsonValue());
    chosen.set("refusal", std::string("FI_MR_CACHE_MONITOR='") + name + "': " + refusal);
  }
  return chosen;
}

const char* device_cache_variable(int iface) {
  switch (iface) {
    case HMR_HMEM_CUDA: return "FI_MR_CUDA_CACHE_MONITOR_ENABLED";
    case HMR_HMEM_ROCR: return "FI_MR_ROCR_CACHE_MONITOR_ENABLED";
    case HMR_HMEM_ZE: return "FI_MR_ZE_CACHE_MONITOR_ENABLED";
  }
  return nullptr;  // Neuron and SynapseAI have no variable: always cached, invalidated explicitly
}

std::string tracking_text(hmem::Iface::FreeTracking tracking) {
  switch (tracking) {
    case hmem::Iface::FreeTracking::alloc_id:
      return "allocation ids: cache keys carry the runtime's id, so a new allocation at an old "
             "address never hits an old entry";
    case hmem::Iface::FreeTracking::free_events:
      return "the runtime calls back when memory is freed, and the entries die then";
    case hmem::Iface::FreeTracking::explicit_only:
      return "the runtime reports no frees: the application calls hmr_mem_invalidate (or "
             "frees through hmr_mem_free) before it frees";
    case hmem::Iface::FreeTracking::none:
      return "the runtime reports frees in no way hmr can use, so its memory is never cached";
  }
  return "unknown";
}

JsonValue device_monitor_json(const hmem::IfaceReport& report,
                              const Result<core::Environment>& environment) {
  JsonValue entry = JsonValue::object();
  entry.set("name", report.name);
  entry.set("free_tracking", free_tracking_name(report.free_tracking));
  const char* variable = device_cache_variable(report.iface);
  entry.set("variable", variable != nullptr ? JsonValue(variable) : JsonValue());
  bool cached = false;
  std::string reason;
  if (!report.loaded) {
    reason = "not loaded: " + report.reason;
  } else if (!environment.ok()) {
    reason = "the environment does not parse: " + environment.status().reason();
  } else if (const char* limit = cache_turned_off_by(environment.value())) {
    reason = std::string(limit) + " is 0: no registration is cached";
  } else if (std::strcmp(environment.value().cache_monitor, "disabled") == 0) {
    // (hmr_domain_open opens no cache at all then, device caches included.)
    reason = "FI_MR_CACHE_MONITOR=disabled: no registration is cached";
  } else if (!environment.value().device_cache[static_cast<size_t>(report.iface)]) {
    reason = std::string(variable != nullptr ? variable : "its variable") +
             "=0: registrations of this memory are not cached";
  } else {
    cached = report.free_tracking != hmem::Iface::FreeTracking::none;
    reason = tracking_text(report.free_tracking);
  }
  entry.set("cached", answer(cached, reason));
  return entry;
}

}  // namespace

JsonValue monitors_section(const std::vector<hmem::IfaceReport>& reports,
                           const Result<core::Environment>& environment) {
  core::MemhooksMonitor& memhooks = core::MemhooksMonitor::instance();
  const bool memhooks_was_installed = memhooks.installed();
  HostMonitor monitors[] = {
      {"userfaultfd", core::UffdMonitor::instance().start()},
      {"memhooks", memhooks.start()},
  };
  // Put libc back as it was; nothing here subscribed a range.
  if (monitors[1].started.ok() && !memhooks_was_installed) memhooks.stop();

  JsonValue section = JsonValue::object();
  JsonValue& host = section.set("host", JsonValue::array());
  JsonValue uffd = host_monitor_json(monitors[0], "a userfaultfd (UFFD_USER_MODE_ONLY) reports "
                                                  "unmap, madvise and mremap of watched ranges");
  if (monitors[0].started.ok()) {
    const bool knows = core::UffdMonitor::instance().knows_watched();
    uffd.set("knows_watched_pages",
             answer(knows, knows ? "PAGEMAP_SCAN and PROCMAP_QUERY: once a 2 MiB block is learnt, "
                                   "registering more of it makes no system call; only "
                                   "private anonymous and hugetlb mappings are cached under it"
                                 : core::UffdMonitor::instance().why_not_known() +
                                       ": every miss registers its own pages, one ioctl each"));
  }
  host.push(std::move(uffd));
  host.push(host_monitor_json(monitors[1], "libc's munmap, mremap, madvise, brk, shmdt and "
                                           "MAP_FIXED mmap are hooked"));
  JsonValue& chosen = section.set("chosen", chosen_json(environment, monitors, std::size(monitors)));
  if (chosen.find("refusal") == nullptr) chosen.set("refusal", JsonValue());
  section.set("under_pressure", pressure_json());
  JsonValue& devices = section.set("device", JsonValue::array());
  for (const hmem::IfaceReport& report : reports) {
    if (report.iface != HMR_HMEM_SYSTEM) devices.push(device_monitor_json(report, environment));
  }
  return section;
}

}  // namespace hmr::info
