#include "nic/verbs/verbs_options.h"

#include <vector>

#include "nic/option_list.h"

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
  Result<std::vector<nic::OptionItem>> items = nic::parse_option_list(text, "verbs");
  if (!items.ok()) return items.status();
  for (const nic::OptionItem& item : *items) {
    const std::string& name = item.name;
    const std::string& value = item.value;
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
    } else if (name == "fork") {
      if (value == "auto") {
        options.fork = ForkPolicy::automatic;
      } else if (value == "init") {
        options.fork = ForkPolicy::init;
      } else if (value == "off") {
        options.fork = ForkPolicy::off;
      } else {
        return make_error(HMR_EINVAL, "verbs option fork='%s': use auto, init or off",
                          value.c_str());
      }
    } else if (name == "odp" || name == "raw_keys") {
      Result<bool> on = parse_switch(name, value);
      if (!on.ok()) return on.status();
      (name == "odp" ? options.odp : options.raw_keys) = *on;
    } else {
      return make_error(HMR_EINVAL,
                        "unknown verbs option '%s' (known: device, odp, relaxed_ordering, "
                        "raw_keys, fork)",
                        name.c_str());
    }
  }
  return options;
}

}  // namespace hmr::verbs
