#include "ofi_probe.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "answer.h"
#include "hmem/symbol_table.h"

#if defined(HMR_HAVE_OFI)
#include <rdma/fi_domain.h>

#include "nic/mr_mode_names.h"
#include "nic/ofi/ofi_domain.h"
#include "nic/ofi/ofi_library.h"
#endif

namespace hmr::info {

#if !defined(HMR_HAVE_OFI)

JsonValue libfabric_json() {
  JsonValue section = JsonValue::object();
  section.set("library", JsonValue());
  section.set("loaded", false);
  section.set("reason", "this hmr build has no ofi NIC adapter (libfabric's headers, "
                        "libfabric-dev, were missing when it was built)");
  section.set("providers", JsonValue::array());
  return section;
}

#else

namespace {

using nic::ofi::OfiLibrary;

struct InfoDeleter {
  const OfiLibrary* library;
  void operator()(fi_info* info) const { library->fn.fi_freeinfo(info); }
};
using InfoList = std::unique_ptr<fi_info, InfoDeleter>;

std::string version_text(uint32_t version) {
  return std::to_string(FI_MAJOR(version)) + "." + std::to_string(FI_MINOR(version));
}

const char* endpoint_type_name(fi_ep_type type) {
  switch (type) {
    case FI_EP_UNSPEC: return "unspec";
    case FI_EP_MSG: return "msg";
    case FI_EP_DGRAM: return "dgram";
    case FI_EP_RDM: return "rdm";
    case FI_EP_SOCK_STREAM: return "sock_stream";
    case FI_EP_SOCK_DGRAM: return "sock_dgram";
  }
  return "unknown";
}

std::string mode_text(uint64_t mode) {
  char hex[24];
  std::snprintf(hex, sizeof hex, " (%#llx)", static_cast<unsigned long long>(mode));
  return nic::mode_names(mode) + hex;
}

const char* text_or(const char* text, const char* fallback) {
  return text != nullptr ? text : fallback;
}

// fi_getinfo with `hints` (null: none); the list or why there is none.
Result<InfoList> get_info(const OfiLibrary& library, const fi_info* hints) {
  fi_info* list = nullptr;
  const int rc = library.fn.fi_getinfo(library.api_version, nullptr, nullptr, 0,
                                       const_cast<fi_info*>(hints), &list);
  if (rc != 0) {
    return make_error(HMR_ENODATA, "fi_getinfo(API %s) failed: %s",
                      version_text(library.api_version).c_str(), library.describe(rc).c_str());
  }
  return InfoList(list, InfoDeleter{&library});
}

// The question the ofi adapter asks when it opens a domain itself: RMA on reliable datagram
// endpoints, offering the mr_mode bits it can honour.
Result<InfoList> get_rma_info(const OfiLibrary& library) {
  InfoList hints(library.fn.fi_dupinfo(nullptr), InfoDeleter{&library});  // fi_allocinfo
  if (!hints) return make_error(HMR_ENOMEM, "out of memory allocating fi_getinfo hints");
  hints->caps = FI_MSG | FI_RMA;
  hints->mode = ~0ULL;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(nic::ofi::kDefaultModeHints);
  return get_info(library, hints.get());
}

// One provider (fi_getinfo lists it once per fabric, domain and endpoint type).
struct Provider {
  std::string name;
  std::vector<std::string> fabrics;
  std::vector<std::string> endpoint_types;
  std::vector<std::string> domains;
  uint64_t mr_mode = 0;
  bool hmem = false;
  bool rma = false;
  uint64_t rma_mr_mode = 0;
};

void add_unique(std::vector<std::string>& list, const std::string& value) {
  for (const std::string& present : list) {
    if (present == value) return;
  }
  list.push_back(value);
}

Provider& provider_for(std::vector<Provider>& providers, const fi_info& info) {
  const std::string name = text_or(info.fabric_attr->prov_name, "?");
  Provider* found = nullptr;
  for (Provider& provider : providers) {
    if (provider.name == name) found = &provider;
  }
  if (found == nullptr) {
    providers.push_back(Provider{name, {}, {}, {}, 0, false, false, 0});
    found = &providers.back();
    found->mr_mode = static_cast<uint64_t>(info.domain_attr->mr_mode);
  }
  add_unique(found->fabrics, text_or(info.fabric_attr->name, "?"));
  return *found;
}

JsonValue provider_json(const Provider& provider, const std::string& rma_failure) {
  JsonValue entry = JsonValue::object();
  entry.set("name", provider.name);
  JsonValue& fabrics = entry.set("fabrics", JsonValue::array());
  for (const std::string& fabric : provider.fabrics) fabrics.push(fabric);
  JsonValue& types = entry.set("endpoint_types", JsonValue::array());
  for (const std::string& type : provider.endpoint_types) types.push(type);
  JsonValue& domains = entry.set("domains", JsonValue::array());
  for (const std::string& domain : provider.domains) domains.push(domain);
  entry.set("mr_mode", mode_text(provider.mr_mode));
  entry.set("hmem", provider.hmem);
  std::string rma_reason;
  if (provider.rma) {
    rma_reason = "offers FI_RMA on FI_EP_RDM to hmr's mr_mode bits, requiring " +
                 mode_text(provider.rma_mr_mode);
  } else if (!rma_failure.empty()) {
    rma_reason = rma_failure;
  } else {
    rma_reason = "not offered for FI_RMA on FI_EP_RDM with hmr's mr_mode bits " +
                 mode_text(nic::ofi::kDefaultModeHints);
  }
  entry.set("rma", answer(provider.rma, rma_reason));
  return entry;
}

}  // namespace

JsonValue libfabric_json() {
  JsonValue section = JsonValue::object();
  Result<const OfiLibrary*> loaded = nic::ofi::load_ofi_library();
  if (!loaded.ok()) {
    section.set("library",
                hmem::resolve_library_path(nic::ofi::kOfiVendor, nic::ofi::kOfiDefaultLibrary));
    section.set("loaded", false);
    section.set("reason", loaded.status().reason());
    section.set("providers", JsonValue::array());
    return section;
  }
  const OfiLibrary& library = **loaded;
  section.set("library", library.table.path());
  section.set("loaded", true);
  section.set("version", library.version_text());
  section.set("api_version", version_text(library.api_version));

  std::vector<Provider> providers;
  Result<InfoList> all = get_info(library, nullptr);
  if (all.ok()) {
    for (const fi_info* info = all->get(); info != nullptr; info = info->next) {
      Provider& provider = provider_for(providers, *info);
      add_unique(provider.endpoint_types, endpoint_type_name(info->ep_attr->type));
      add_unique(provider.domains, text_or(info->domain_attr->name, "?"));
      provider.hmem = provider.hmem || (info->caps & FI_HMEM) != 0;
    }
  }
  Result<InfoList> rma = get_rma_info(library);
  if (rma.ok()) {
    for (const fi_info* info = rma->get(); info != nullptr; info = info->next) {
      Provider& provider = provider_for(providers, *info);
      if (!provider.rma) provider.rma_mr_mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
      provider.rma = true;
    }
  }
  std::string reason;
  if (!all.ok()) reason = all.status().reason();
  if (providers.empty() && reason.empty()) reason = "fi_getinfo found no provider";
  section.set("reason", reason.empty() ? JsonValue() : JsonValue(reason));
  const std::string rma_failure =
      rma.ok() ? std::string() : "the RMA query failed: " + rma.status().reason();
  JsonValue& list = section.set("providers", JsonValue::array());
  for (const Provider& provider : providers) list.push(provider_json(provider, rma_failure));
  return section;
}

#endif

}  // namespace hmr::info
