#include "nic/ofi/ofi_options.h"

#include <rdma/fabric.h>
#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "nic/mr_mode_names.h"
#include "nic/option_list.h"

namespace hmr::nic::ofi {
namespace {

Result<uint64_t> parse_mode(const std::string& value) {
  if (value.empty()) return make_error(HMR_EINVAL, "ofi option mr_mode= is empty");
  if (std::isdigit(static_cast<unsigned char>(value[0])) == 0) {
    return nic::parse_mode_names(value);
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long mode = std::strtoull(value.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') {
    return make_error(HMR_EINVAL, "ofi option mr_mode='%s' is neither a number nor mode names",
                      value.c_str());
  }
  if ((mode & ~nic::kKnownModeBits) != 0) {
    return make_error(HMR_EINVAL, "ofi option mr_mode=%#llx has bits hmr does not know (%#llx)",
                      mode, mode & ~nic::kKnownModeBits);
  }
  return static_cast<uint64_t>(mode);
}

Result<EndpointType> parse_endpoint_type(const std::string& value) {
  if (strcasecmp(value.c_str(), "rdm") == 0) return EndpointType::rdm;
  if (strcasecmp(value.c_str(), "msg") == 0) return EndpointType::msg;
  if (strcasecmp(value.c_str(), "dgram") == 0) return EndpointType::dgram;
  return make_error(HMR_EINVAL, "ofi option ep_type='%s' is not rdm, msg or dgram", value.c_str());
}

Result<bool> parse_switch(const std::string& name, const std::string& value) {
  if (value == "1" || strcasecmp(value.c_str(), "yes") == 0) return true;
  if (value == "0" || strcasecmp(value.c_str(), "no") == 0) return false;
  return make_error(HMR_EINVAL, "ofi option %s='%s' is not 1/0/yes/no", name.c_str(),
                    value.c_str());
}


// fi_threading by its name in fi_domain(3) ("safe", "domain", "completion", "endpoint",
// "fid", "unspec", with or without FI_THREAD_) or its number, as an application prints
// info->domain_attr->threading.
Result<int> parse_threading(const std::string& value) {
  struct Level {
    const char* name;
    int value;
  };
  static constexpr Level kLevels[] = {
      {"unspec", FI_THREAD_UNSPEC},     {"safe", FI_THREAD_SAFE},
      {"fid", FI_THREAD_FID},           {"domain", FI_THREAD_DOMAIN},
      {"completion", FI_THREAD_COMPLETION}, {"endpoint", FI_THREAD_ENDPOINT}};
  std::string name = value;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.rfind("fi_thread_", 0) == 0) name = name.substr(10);
  for (const Level& level : kLevels) {
    if (name == level.name) return level.value;
  }
  char* end = nullptr;
  const long number = std::strtol(value.c_str(), &end, 0);
  if (!value.empty() && end != nullptr && *end == '\0') {
    for (const Level& level : kLevels) {
      if (number == level.value) return level.value;
    }
  }
  return make_error(HMR_EINVAL, "ofi option threading=%s: not a libfabric threading level "
                    "(safe, domain, completion, endpoint, fid, unspec, or its number)",
                    value.c_str());
}

}  // namespace

const char* endpoint_type_name(EndpointType type) {
  switch (type) {
    case EndpointType::rdm: return "rdm";
    case EndpointType::msg: return "msg";
    case EndpointType::dgram: return "dgram";
  }
  return "?";
}

Result<OfiOptions> parse_ofi_options(const char* text) {
  OfiOptions options;
  bool continues_provider = false;
  for (const nic::OptionItem& item : nic::split_option_list(text)) {
    if (!item.has_value) {
      if (!continues_provider) {
        return make_error(HMR_EINVAL, "ofi option '%s' is not name=value", item.name.c_str());
      }
      options.provider += ";" + item.name;  // a layered provider name, "tcp;ofi_rxm"
      continue;
    }
    continues_provider = false;
    const std::string& name = item.name;
    const std::string& value = item.value;
    if (name == "provider") {
      if (value.empty()) return make_error(HMR_EINVAL, "ofi option provider= is empty");
      options.provider = value;
      continues_provider = true;
    } else if (name == "ep_type") {
      Result<EndpointType> type = parse_endpoint_type(value);
      if (!type.ok()) return type.status();
      options.endpoint_type = *type;
    } else if (name == "domain") {
      options.domain = value;
    } else if (name == "fabric") {
      options.fabric = value;
    } else if (name == "mr_mode") {
      Result<uint64_t> mode = parse_mode(value);
      if (!mode.ok()) return mode.status();
      if (*mode & (HMR_MR_BASIC | HMR_MR_SCALABLE)) {
        return make_error(HMR_EINVAL,
                          "ofi option mr_mode= takes explicit bits, not BASIC or SCALABLE");
      }
      options.mr_mode = *mode;
    } else if (name == "hmem") {
      Result<bool> hmem = parse_switch(name, value);
      if (!hmem.ok()) return hmem.status();
      options.hmem = *hmem;
    } else if (name == "threading") {
      Result<int> threading = parse_threading(value);
      if (!threading.ok()) return threading.status();
      options.threading = *threading;
    } else {
      return make_error(HMR_EINVAL,
                        "unknown ofi option '%s' (known: provider, ep_type, domain, fabric, "
                        "mr_mode, hmem, threading)",
                        name.c_str());
    }
  }
  return options;
}

}  // namespace hmr::nic::ofi
