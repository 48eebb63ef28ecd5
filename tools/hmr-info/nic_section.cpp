#include "nic_section.h"

#include <string>

#include "answer.h"
#include "hmem/peer_direct.h"
#include "kernel_config.h"
#include "kernel_probe.h"
#include "ofi_probe.h"
#include "rocr/rocr_kernel_dmabuf.h"
#include "verbs_probe.h"

namespace hmr::info {
namespace {

JsonValue peer_memory_json() {
  const hmem::PeerDirectReport report = hmem::probe_peer_direct("");
  JsonValue peer = JsonValue::object();
  peer.set("available", report.available);
  JsonValue& clients = peer.set("clients", JsonValue::array());
  for (const hmem::PeerMemoryClient& client : report.clients) {
    JsonValue entry = JsonValue::object();
    entry.set("name", client.name);
    entry.set("path", client.path);
    entry.set("version", client.version);
    clients.push(std::move(entry));
  }
  peer.set("reason", report.reason);
  return peer;
}

// Whether this host can import dma-bufs into RDMA registrations: a device probe that says
// yes is direct evidence; otherwise the kernel version and modules explain why not.
JsonValue dmabuf_import_answer(const KernelVersion& kernel, const JsonValue& modules,
                               const JsonValue& verbs) {
  std::string importers;
  size_t devices = 0;
  for (const JsonValue& device : verbs.find("devices")->items()) {
    ++devices;
    const JsonValue* supported = device.at("dmabuf.supported");
    if (supported != nullptr && supported->as_bool()) {
      importers += (importers.empty() ? "" : ", ") + device.find("name")->as_string();
    }
  }
  if (!importers.empty()) {
    return answer(true, "RDMA device(s) " + importers +
                            " import dma-bufs (ibv_reg_dmabuf_mr probe)");
  }
  const bool new_enough = kernel.major > 5 || (kernel.major == 5 && kernel.minor >= 12);
  if (!new_enough) {
    return answer(false, "kernel " + kernel.release +
                             " is older than 5.12, the first with dma-buf import for RDMA");
  }
  const std::string kernel_ok = "kernel " + kernel.release + " is new enough (>= 5.12)";
  if (!modules.find("ib_uverbs")->as_bool() || !modules.find("ib_core")->as_bool()) {
    return answer(false, kernel_ok + ", but it has no RDMA support loaded (" +
                             modules.find("evidence")->as_string() + ")");
  }
  if (devices > 0) {
    return answer(false, kernel_ok + ", but no RDMA device's provider imports dma-bufs (see "
                                     "verbs.devices)");
  }
  const JsonValue* why = verbs.find("reason");
  return answer(false, kernel_ok + " and RDMA is loaded, but there is no RDMA device to import "
                                   "into" +
                           (why != nullptr && why->is_string() ? ": " + why->as_string() : ""));
}

}  // namespace

JsonValue nics_section() {
  JsonValue nics = JsonValue::object();
  JsonValue modules = rdma_modules_json();
  JsonValue verbs = verbs_json();
  JsonValue dmabuf_import = dmabuf_import_answer(kernel_version(), modules, verbs);
  nics.set("kernel", kernel_json());
  nics.set("rdma_modules", std::move(modules));
  nics.set("infiniband_sysfs", infiniband_sysfs_json());
  nics.set("kernel_config", kernel_config_json(rocr::default_kernel_config_sources()));
  nics.set("dmabuf_import", std::move(dmabuf_import));
  nics.set("peer_memory", peer_memory_json());
  nics.set("memlock", memlock_json());
  nics.set("verbs", std::move(verbs));
  nics.set("libfabric", libfabric_json());
  return nics;
}

}  // namespace hmr::info
