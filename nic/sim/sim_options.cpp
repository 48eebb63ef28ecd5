#include "nic/sim/sim_options.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "nic/mr_mode_names.h"
#include "nic/option_list.h"

namespace hmr::nic::sim {
namespace {

Result<uint64_t> parse_count(const std::string& name, const std::string& value) {
  if (value.empty() || value[0] == '-') {
    return make_error(HMR_EINVAL, "sim option %s='%s' is not a positive number", name.c_str(),
                      value.c_str());
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long number = std::strtoull(value.c_str(), &end, 0);
  if (errno != 0 || *end != '\0' || number == 0) {
    return make_error(HMR_EINVAL, "sim option %s='%s' is not a positive number", name.c_str(),
                      value.c_str());
  }
  return static_cast<uint64_t>(number);
}

Result<bool> parse_switch(const std::string& name, const std::string& value) {
  if (value == "1") return true;
  if (value == "0") return false;
  return make_error(HMR_EINVAL, "sim option %s='%s' is not 0 or 1", name.c_str(), value.c_str());
}

}  // namespace

Result<SimOptions> parse_sim_options(const char* text) {
  SimOptions options;
  bool key_size_given = false;
  Result<std::vector<OptionItem>> items = parse_option_list(text, "sim");
  if (!items.ok()) return items.status();
  for (const OptionItem& item : *items) {
    const std::string& name = item.name;
    const std::string& value = item.value;
    if (name == "require") {
      Result<uint64_t> mode = nic::parse_mode_names(value);
      if (!mode.ok()) return mode.status();
      options.required_mr_mode = *mode;
      continue;
    }
    if (name == "dmabuf" || name == "peer_direct" || name == "pins") {
      Result<bool> on = parse_switch(name, value);
      if (!on.ok()) return on.status();
      (name == "dmabuf" ? options.dmabuf_import : name == "pins" ? options.pins
                                                                 : options.peer_direct) = *on;
      continue;
    }
    if (name != "key_size" && name != "iov_limit" && name != "mr_cnt" && name != "max_mr_size" &&
        name != "max_pinned") {
      return make_error(HMR_EINVAL,
                        "unknown sim option '%s' (known: require, key_size, iov_limit, "
                        "mr_cnt, max_mr_size, dmabuf, peer_direct, pins, max_pinned)",
                        name.c_str());
    }
    Result<uint64_t> number = parse_count(name, value);
    if (!number.ok()) return number.status();
    if (name == "key_size") {
      options.key_size = *number;
      key_size_given = true;
    } else if (name == "iov_limit") {
      options.iov_limit = *number;
    } else if (name == "mr_cnt") {
      options.mr_cnt = *number;
    } else if (name == "max_mr_size") {
      options.max_mr_size = *number;
    } else {  // max_pinned
      options.max_pinned_bytes = *number;
    }
  }
  if (options.required_mr_mode & (HMR_MR_BASIC | HMR_MR_SCALABLE)) {
    return make_error(HMR_EINVAL, "sim option require= takes explicit bits, not BASIC/SCALABLE");
  }
  const bool raw = options.required_mr_mode & HMR_MR_RAW;
  if (raw) {
    options.required_mr_mode |= HMR_MR_PROV_KEY;
    if (!key_size_given) options.key_size = 16;
    if (options.key_size != 16) {
      return make_error(HMR_EINVAL, "sim option key_size=%zu: RAW keys are 16 bytes",
                        options.key_size);
    }
  } else if (options.key_size > 8) {
    return make_error(HMR_EINVAL, "sim option key_size=%zu: at most 8 bytes without RAW",
                      options.key_size);
  }
  return options;
}

}  // namespace hmr::nic::sim
