#include "nic/ofi/ofi_domain.h"

#include <cstring>

#include "nic/mr_mode_names.h"
#include "nic/ofi/ofi_error.h"

namespace hmr::nic::ofi {
namespace {

fi_ep_type fi_endpoint_type(EndpointType type) {
  switch (type) {
    case EndpointType::rdm: return FI_EP_RDM;
    case EndpointType::msg: return FI_EP_MSG;
    case EndpointType::dgram: return FI_EP_DGRAM;
  }
  return FI_EP_RDM;
}

// Sets a string of hints; fi_freeinfo frees it, so it must come from malloc.
Status set_hint(char*& field, const std::string& value) {
  if (value.empty()) return ok_status();
  field = strdup(value.c_str());
  if (field == nullptr) return make_error(HMR_ENOMEM, "out of memory copying fi_getinfo hints");
  return ok_status();
}

bool matches(const char* name, const std::string& wanted) {
  return wanted.empty() || (name != nullptr && wanted == name);
}

}  // namespace

OfiDomain::OfiDomain(const OfiLibrary& library, const OfiOptions& options)
    : library_(library), options_(options), infos_(nullptr, InfoDeleter{&library}) {}

OfiDomain::~OfiDomain() = default;

Result<std::unique_ptr<OfiDomain>> OfiDomain::open(const OfiLibrary& library,
                                                   const OfiOptions& options, void* handle) {
  std::unique_ptr<OfiDomain> domain(new OfiDomain(library, options));
  HMR_RETURN_IF_ERROR(handle != nullptr ? domain->wrap(handle) : domain->open_own());
  return domain;
}

Result<OfiDomain::InfoList> OfiDomain::query(uint64_t mode_hints, uint64_t caps,
                                             fi_threading threading) const {
  InfoList hints(library_.fn.fi_dupinfo(nullptr), InfoDeleter{&library_});  // fi_allocinfo
  if (!hints) return make_error(HMR_ENOMEM, "out of memory allocating fi_getinfo hints");
  hints->ep_attr->type = fi_endpoint_type(options_.endpoint_type);
  hints->caps = caps;
  // hmr only registers memory; whatever modes data transfers need are the application's.
  hints->mode = ~0ULL;
  hints->domain_attr->mr_mode = static_cast<int>(mode_hints);
  hints->domain_attr->threading = threading;
  HMR_RETURN_IF_ERROR(set_hint(hints->fabric_attr->prov_name, options_.provider));
  HMR_RETURN_IF_ERROR(set_hint(hints->domain_attr->name, options_.domain));
  HMR_RETURN_IF_ERROR(set_hint(hints->fabric_attr->name, options_.fabric));

  fi_info* answers = nullptr;
  const int rc = library_.fn.fi_getinfo(library_.api_version, nullptr, nullptr, 0, hints.get(),
                                        &answers);
  InfoList list(answers, InfoDeleter{&library_});
  if (rc != 0) {
    const std::string provider = options_.provider.empty() ? "any" : "'" + options_.provider + "'";
    return make_error(rc == -FI_ENODATA ? HMR_ENODEV : hmr_code_for_fi(rc),
                      "libfabric %s: fi_getinfo(API %u.%u) found no %s provider for ep_type %s, "
                      "caps %#llx, mr_mode %s: %s (libfabric's provider names: tcp, shm, "
                      "tcp;ofi_rxm, ...; FI_PROVIDER restricts which it loads)",
                      library_.version_text().c_str(), FI_MAJOR(library_.api_version),
                      FI_MINOR(library_.api_version), provider.c_str(),
                      endpoint_type_name(options_.endpoint_type),
                      static_cast<unsigned long long>(caps), nic::mode_names(mode_hints).c_str(),
                      library_.describe(rc).c_str());
  }
  return list;
}

Status OfiDomain::find_info(uint64_t mode_hints, uint64_t extra_caps, fi_threading threading) {
  Result<InfoList> list = query(mode_hints, FI_MSG | FI_RMA | extra_caps, threading);
  if (!list.ok()) return list.status();
  std::string offered;
  for (fi_info* info = list->get(); info != nullptr; info = info->next) {
    if (matches(info->domain_attr->name, options_.domain) &&
        matches(info->fabric_attr->name, options_.fabric)) {
      infos_ = std::move(*list);
      info_ = info;
      who_ = "libfabric " + library_.version_text() + " provider " +
             info->fabric_attr->prov_name;
      return ok_status();
    }
    const std::string name = std::string(info->domain_attr->name) + " (" +
                             info->fabric_attr->name + ")";
    if (offered.find(name) == std::string::npos && offered.size() < 300) {
      offered += (offered.empty() ? "" : ", ") + name;  // each answer once, per endpoint kind
    }
  }
  return make_error(HMR_ENODEV, "libfabric %s has no %s domain named '%s' in fabric '%s'; it "
                    "offers (domain (fabric)): %s", library_.version_text().c_str(),
                    options_.provider.c_str(),
                    options_.domain.empty() ? "(any)" : options_.domain.c_str(),
                    options_.fabric.empty() ? "(any)" : options_.fabric.c_str(), offered.c_str());
}

Status OfiDomain::open_own() {
  if (options_.threading) {
    return make_error(HMR_EINVAL, "ofi option threading= describes a domain you opened and wrap "
                      "(nic_handle); the domain hmr opens is FI_THREAD_SAFE");
  }
  // hmr registers from any thread that calls it (and from its asynchronous worker).
  HMR_RETURN_IF_ERROR(find_info(options_.mr_mode.value_or(kDefaultModeHints),
                                options_.hmem ? FI_HMEM : 0, FI_THREAD_SAFE));
  fid_fabric* fabric = nullptr;
  int rc = library_.fn.fi_fabric(info_->fabric_attr, &fabric, nullptr);
  if (rc != 0) {
    return make_error(hmr_code_for_fi(rc), "%s: fi_fabric(%s) failed: %s", who_.c_str(),
                      info_->fabric_attr->name, library_.describe(rc).c_str());
  }
  fabric_.reset(&fabric->fid);
  fid_domain* domain = nullptr;
  rc = fi_domain(fabric, const_cast<fi_info*>(info_), &domain, nullptr);
  if (rc != 0) {
    return make_error(hmr_code_for_fi(rc), "%s: fi_domain(%s) failed: %s", who_.c_str(),
                      info_->domain_attr->name, library_.describe(rc).c_str());
  }
  owned_domain_.reset(&domain->fid);
  domain_ = domain;
  mr_mode_ = static_cast<uint64_t>(info_->domain_attr->mr_mode);
  return ok_status();
}

Status OfiDomain::close_own() {
  if (!owned_domain_) return ok_status();
  const int rc = fi_close(owned_domain_.release());
  domain_ = nullptr;
  if (rc != 0) {
    (void)fabric_.release();  // the domain on it stays open: so must the fabric
    // Not EBUSY whatever libfabric said: the hmr domain is gone, and -HMR_EBUSY from a close
    // means that nothing was closed (a caller would close the freed handle again).
    return make_error(HMR_EIO,
                      "%s: libfabric refused to close the domain hmr opened (fi_close: %s)%s; "
                      "the hmr domain is closed, libfabric's domain and fabric are left open "
                      "(libfabric cannot be asked to close a domain twice)",
                      who_.c_str(), library_.describe(rc).c_str(),
                      rc == -FI_EBUSY ? ": objects you opened on it through nic_handle "
                                        "(endpoints, completion queues, address vectors, "
                                        "counters, MRs) were still open; close them before "
                                        "hmr_domain_close"
                                      : "");
  }
  fabric_.reset();  // nothing of ours is left on it
  return ok_status();
}

Status OfiDomain::wrap(void* handle) {
  if (options_.provider.empty() || !options_.mr_mode) {
    return make_error(HMR_EINVAL,
                      "nic_handle wraps your libfabric domain, and libfabric cannot tell hmr "
                      "how it was opened: say it in nic_options, as "
                      "\"provider=<info->fabric_attr->prov_name>;mr_mode=<info->domain_attr->"
                      "mr_mode>\" (missing: %s%s)",
                      options_.provider.empty() ? "provider " : "",
                      options_.mr_mode ? "" : "mr_mode");
  }
  auto* domain = static_cast<fid_domain*>(handle);
  // Every libfabric object starts with its class; this catches another libfabric object (a
  // fabric, an endpoint) and most other structs.  A pointer to unreadable memory cannot be
  // caught: nic_handle must point at something real.
  if (domain->fid.fclass != FI_CLASS_DOMAIN) {
    return make_error(HMR_EINVAL,
                      "nic_handle %p is not a libfabric domain: its fid class is %zu, a "
                      "struct fid_domain's is %d",
                      handle, domain->fid.fclass, static_cast<int>(FI_CLASS_DOMAIN));
  }
  if (domain->mr == nullptr || domain->mr->regattr == nullptr) {
    return make_error(HMR_EOPNOTSUPP, "the libfabric domain %p has no memory registration "
                      "operations", handle);
  }
  const uint64_t stated = *options_.mr_mode;
  HMR_RETURN_IF_ERROR(find_info(stated, options_.hmem ? FI_HMEM : 0, FI_THREAD_UNSPEC));
  const auto answered = static_cast<uint64_t>(info_->domain_attr->mr_mode);
  if ((answered & ~stated) != 0) {
    return make_error(HMR_EINVAL,
                      "%s requires mr_mode %s, but nic_options say the domain was opened with "
                      "%s: give mr_mode= the domain's info->domain_attr->mr_mode",
                      who_.c_str(), nic::mode_names(answered).c_str(),
                      nic::mode_names(stated).c_str());
  }
  // Bits that change what keys and addresses mean must be the domain's own: hints with
  // PROV_KEY to which the provider answered without it give a domain that takes requested
  // keys, and hmr would hand it none (FI_ENOKEY from the second registration on) and give
  // peers virtual addresses on an offset-addressed domain.
  const uint64_t meaning = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_RAW;
  if ((stated & ~answered & meaning) != 0) {
    return make_error(HMR_EINVAL,
                      "nic_options say the domain was opened with mr_mode %s, but %s, asked with "
                      "that mode, answers %s: it does not use %s. Give mr_mode= the mode "
                      "fi_getinfo answered (info->domain_attr->mr_mode), not the hints",
                      nic::mode_names(stated).c_str(), who_.c_str(),
                      nic::mode_names(answered).c_str(),
                      nic::mode_names(stated & ~answered & meaning).c_str());
  }
  domain_ = domain;
  mr_mode_ = stated;
  return ok_status();
}

bool OfiDomain::provider_offers_hmem() const {
  if (info_->caps & FI_HMEM) return true;
  return query(mr_mode_ | FI_MR_HMEM, FI_RMA | FI_HMEM, FI_THREAD_UNSPEC).ok();
}

}  // namespace hmr::nic::ofi
