#include "nic/verbs/verbs_options.h"

#include <string_view>

namespace hmr::verbs {
namespace {

Result<bool> parse_switch(const std::string& name, const std::string& value) {
  if (value == "on" || value == "1" || value == "yes") return true;
  if (value == "off" || value == "0" || value == "no") return false;
  return make_error(HMR_EINVAL, "verbs option %s='%s': use on or off", name.c_str(),
                    value.c_str());
}

}  // namespace

Result<VerbsOptions> parse_verbs_options(const char* text) {
  VerbsOptions options;
  std::string_view rest = text == nullptr ? std::string_view() : std::string_view(text);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string item(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      return make_error(HMR_EINVAL, "verbs option '%s' is not name=value", item.c_str());
    }
    const std::string name = item.substr(0, equals);
    const std::string value = item.substr(equals + 1);
    if (name == "device") {
      if (value.empty()) return make_error(HMR_EINVAL, "verbs option device= needs a name");
      options.device = value;
    } else if (name == "relaxed_ordering") {
      if (value == "auto") {
        options.relaxed_ordering = Tristate::automatic;
      } else {
        Result<bool> on = parse_switch(name, value);
        if (!on.ok()) {
          return make_error(HMR_EINVAL, "verbs option relaxed_ordering='%s': use auto, on or off",
                            value.c_str());
        }
        options.relaxed_ordering = *on ? Tristate::on : Tristate::off;
      }
    } else if (name == "odp" || name == "raw_keys") {
      Result<bool> on = parse_switch(name, value);
      if (!on.ok()) return on.status();
      (name == "odp" ? options.odp : options.raw_keys) = *on;
    } else {
      return make_error(HMR_EINVAL,
                        "unknown verbs option '%s' (known: device, odp, relaxed_ordering, "
                        "raw_keys)",
                        name.c_str());
    }
  }
  return options;
}

}  // namespace hmr::verbs
