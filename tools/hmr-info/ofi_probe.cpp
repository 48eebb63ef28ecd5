#include "ofi_probe.h"

#include <cstdio>
#include <cstring>
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

// The question the ofi adapter asks when it opens a domain itself with nic_options
// "provider=<name>": RMA on reliable datagram endpoints, offering the mr_mode bits it can
// honour.  libfabric may answer with another name: "tcp" is served as "tcp;ofi_rxm" (ofi_rxm
// layered over the tcp core), so a name is judged by what this query gives, not by the rows
// fi_getinfo lists under it without hints.
Result<InfoList> get_rma_info(const OfiLibrary& library, const std::string& provider) {
  InfoList hints(library.fn.fi_dupinfo(nullptr), InfoDeleter{&library});  // fi_allocinfo
  if (!hints) return make_error(HMR_ENOMEM, "out of memory allocating fi_getinfo hints");
  hints->caps = FI_MSG | FI_RMA;
  hints->mode = ~0ULL;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(nic::ofi::kDefaultModeHints);
  // fi_freeinfo (through the deleter) frees it, as it frees everything in an fi_info.
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (hints->fabric_attr->prov_name == nullptr) {
    return make_error(HMR_ENOMEM, "out of memory allocating fi_getinfo hints");
  }
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
  // What "provider=<name>" gives hmr's ofi adapter: the name libfabric answers with, and the
  // mr_mode that answer requires; empty when the RMA query finds nothing (rma_failure says why).
  std::string rma_provider;
  uint64_t rma_mr_mode = 0;
  std::string rma_failure;
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
    providers.push_back(Provider{name, {}, {}, {}, 0, false, {}, 0, {}});
    found = &providers.back();
    found->mr_mode = static_cast<uint64_t>(info.domain_attr->mr_mode);
  }
  add_unique(found->fabrics, text_or(info.fabric_attr->name, "?"));
  return *found;
}

void ask_rma(const OfiLibrary& library, Provider& provider) {
  Result<InfoList> rma = get_rma_info(library, provider.name);
  if (!rma.ok()) {
    provider.rma_failure = rma.status().reason();
    return;
  }
  const fi_info* first = rma->get();
  if (first == nullptr) {
    provider.rma_failure = "fi_getinfo answered with an empty list";
    return;
  }
  provider.rma_provider = text_or(first->fabric_attr->prov_name, "?");
  provider.rma_mr_mode = static_cast<uint64_t>(first->domain_attr->mr_mode);
}

// The name to pass in nic_options for this row: the shortest that reaches the same provider
// ("tcp;ofi_rxm" is reached by "tcp"), or empty when the row offers hmr no RMA.
std::string name_to_use(const Provider& provider, const std::vector<Provider>& providers) {
  if (provider.rma_provider.empty()) return {};
  const size_t layer = provider.name.find(';');
  if (layer != std::string::npos) {
    const std::string core = provider.name.substr(0, layer);
    for (const Provider& other : providers) {
      if (other.name == core && other.rma_provider == provider.rma_provider) return core;
    }
  }
  return provider.name;
}

JsonValue provider_json(const Provider& provider, const std::vector<Provider>& providers) {
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
  const std::string use = name_to_use(provider, providers);
  entry.set("use", use.empty() ? JsonValue() : JsonValue("provider=" + use));
  entry.set("resolves_to",
            provider.rma_provider.empty() ? JsonValue() : JsonValue(provider.rma_provider));
  std::string rma_reason;
  if (!use.empty()) {
    rma_reason = "nic_options \"provider=" + use + "\" works";
    if (provider.rma_provider != provider.name) {
      rma_reason += " (libfabric serves it as " + provider.rma_provider + ")";
    }
    rma_reason += ": FI_RMA on FI_EP_RDM for hmr's mr_mode bits, requiring " +
                  mode_text(provider.rma_mr_mode);
  } else {
    rma_reason = "nic_options \"provider=" + provider.name +
                 "\" finds no FI_RMA on FI_EP_RDM for hmr's mr_mode bits " +
                 mode_text(nic::ofi::kDefaultModeHints) + ": " + provider.rma_failure;
  }
  entry.set("rma", answer(!use.empty(), rma_reason));
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
  // One question per name, as an application passing that name would ask (each is cheap
  // once libfabric has loaded its providers).
  for (Provider& provider : providers) ask_rma(library, provider);
  std::string reason;
  if (!all.ok()) reason = all.status().reason();
  if (providers.empty() && reason.empty()) reason = "fi_getinfo found no provider";
  section.set("reason", reason.empty() ? JsonValue() : JsonValue(reason));
  JsonValue& list = section.set("providers", JsonValue::array());
  for (const Provider& provider : providers) list.push(provider_json(provider, providers));
  return section;
}

#endif

}  // namespace hmr::info
