#include "nic_section.h"

#include <hmr/hmr.h>

#include <cstdio>
#include <cstring>
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

// The mr_mode an application offers when it can honour everything hmr's ofi adapter offers a
// provider; a NIC then requires what it must, and sim gets VIRT_ADDR and PROV_KEY.
constexpr uint64_t kOfferedMrMode = HMR_MR_LOCAL | HMR_MR_RAW | HMR_MR_VIRT_ADDR |
                                    HMR_MR_ALLOCATED | HMR_MR_PROV_KEY | HMR_MR_MMU_NOTIFY |
                                    HMR_MR_HMEM;

struct OperationName {
  hmr_md_op op;
  const char* key;
};
constexpr OperationName kOperations[] = {
    {HMR_MD_OP_REREG, "rereg"},
    {HMR_MD_OP_MEMORY_WINDOWS, "memory_windows"},
    {HMR_MD_OP_ODP, "odp"},
    {HMR_MD_OP_IMPLICIT_ODP, "implicit_odp"},
    {HMR_MD_OP_ADVISE, "advise"},
    {HMR_MD_OP_INDIRECT, "indirect"},
};
static_assert(sizeof kOperations / sizeof kOperations[0] == HMR_MD_OP_COUNT,
              "hmr-info answers for every hmr_md_op");

// Every operation "no", for one reason: the domain to ask could not be had.
JsonValue operations_unknown(const std::string& why) {
  JsonValue operations = JsonValue::object();
  for (const OperationName& name : kOperations) {
    operations.set(name.key, answer(false, "no hmr domain to ask: " + why));
  }
  return operations;
}

// hmr's own words for a failed call: copied before hmr_strerror, itself an hmr call.
std::string failure_text(const char* call, int rc) {
  const std::string reason = hmr_last_error();
  return std::string(call) + " failed: " + hmr_strerror(rc) + (reason.empty() ? "" : ": ") +
         reason;
}

// hmr_md_query_op's six answers for a domain on `nic`, opened through the public ABI as an
// application would (without a cache, so nothing starts that the report did not ask for).
JsonValue operations_json(const char* nic, const std::string& options, void* handle = nullptr) {
  hmr_domain_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic = nic;
  attr.nic_options = options.empty() ? nullptr : options.c_str();
  attr.mr_mode = kOfferedMrMode;
  attr.cache_monitor = "disabled";
  attr.nic_handle = handle;
  hmr_domain* domain = nullptr;
  const int opened = hmr_domain_open(&attr, &domain);
  if (opened < 0) return operations_unknown(failure_text("hmr_domain_open", opened));

  JsonValue operations = JsonValue::object();
  for (const OperationName& name : kOperations) {
    char reason[512] = {};
    const int rc = hmr_md_query_op(domain, name.op, reason, sizeof reason);
    if (rc == 1) {
      operations.set(name.key, answer(true, ""));
    } else if (rc == 0) {
      operations.set(name.key, answer(false, reason[0] != '\0'
                                                 ? std::string(reason)
                                                 : std::string("hmr_md_query_op gave no reason")));
    } else {
      operations.set(name.key, answer(false, failure_text("hmr_md_query_op", rc)));
    }
  }
  (void)hmr_domain_close(domain);
  return operations;
}

// The callback NIC needs functions; asking what it can do registers nothing, so these refuse.
int refuse_registration(void*, const hmr_nic_reg_request*, hmr_nic_mr*, char* reason,
                        size_t reason_size) {
  std::snprintf(reason, reason_size, "hmr-info registers nothing");
  return -HMR_ENOSYS;
}
int accept_deregistration(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

JsonValue callback_operations_json() {
  hmr_nic_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  callbacks.size = sizeof callbacks;
  callbacks.key_size = 8;
  callbacks.reg_va = refuse_registration;
  callbacks.dereg = accept_deregistration;
  return operations_json("callback", "", &callbacks);
}

// `list` (verbs devices or libfabric providers, each with a "name") with each element's
// operations appended as "operations".
template <typename Operations>
JsonValue with_operations(const JsonValue* list, Operations&& operations_of) {
  JsonValue result = JsonValue::array();
  if (list == nullptr) return result;
  for (const JsonValue& item : list->items()) {
    JsonValue entry = item;
    const JsonValue* name = entry.find("name");
    entry.set("operations", operations_of(name != nullptr ? name->as_string() : std::string(),
                                          entry));
    result.push(std::move(entry));
  }
  return result;
}

void add_verbs_operations(JsonValue& verbs) {
  JsonValue devices = with_operations(
      verbs.find("devices"), [](const std::string& device, const JsonValue&) {
        return operations_json("verbs", "device=" + device);
      });
  verbs.set("devices", std::move(devices));
}

// Only a provider that offers RMA for hmr's mr_mode bits can have an hmr domain opened on it;
// for the others the rma answer beside it says why not.
void add_libfabric_operations(JsonValue& libfabric) {
  JsonValue providers = with_operations(
      libfabric.find("providers"), [](const std::string& provider, const JsonValue& entry) {
        const JsonValue* rma = entry.find("rma");
        if (rma != nullptr && is_answer(*rma) && !rma->find("supported")->as_bool()) {
          return operations_unknown("hmr's ofi NIC does not open a provider without RMA (see rma)");
        }
        return operations_json("ofi", "provider=" + provider);
      });
  libfabric.set("providers", std::move(providers));
}

JsonValue adapter_json(JsonValue operations) {
  JsonValue adapter = JsonValue::object();
  adapter.set("operations", std::move(operations));
  return adapter;
}

}  // namespace

JsonValue nics_section() {
  JsonValue nics = JsonValue::object();
  JsonValue modules = rdma_modules_json();
  JsonValue verbs = verbs_json();
  JsonValue dmabuf_import = dmabuf_import_answer(kernel_version(), modules, verbs);
  add_verbs_operations(verbs);
  JsonValue libfabric = libfabric_json();
  add_libfabric_operations(libfabric);
  nics.set("kernel", kernel_json());
  nics.set("rdma_modules", std::move(modules));
  nics.set("infiniband_sysfs", infiniband_sysfs_json());
  nics.set("kernel_config", kernel_config_json(rocr::default_kernel_config_sources()));
  nics.set("dmabuf_import", std::move(dmabuf_import));
  nics.set("peer_memory", peer_memory_json());
  nics.set("memlock", memlock_json());
  nics.set("verbs", std::move(verbs));
  nics.set("libfabric", std::move(libfabric));
  nics.set("sim", adapter_json(operations_json("sim", "")));
  nics.set("callback", adapter_json(callback_operations_json()));
  return nics;
}

}  // namespace hmr::info
