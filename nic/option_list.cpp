#include "nic/option_list.h"

#include <string_view>

namespace hmr::nic {

std::vector<OptionItem> split_option_list(const char* text) {
  std::vector<OptionItem> items;
  std::string_view rest = text == nullptr ? std::string_view() : std::string_view(text);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string_view item = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      items.push_back(OptionItem{std::string(item), std::string(), false});
    } else {
      items.push_back(OptionItem{std::string(item.substr(0, equals)),
                                 std::string(item.substr(equals + 1)), true});
    }
  }
  return items;
}

Result<std::vector<OptionItem>> parse_option_list(const char* text, const char* adapter) {
  std::vector<OptionItem> items = split_option_list(text);
  for (const OptionItem& item : items) {
    if (!item.has_value) {
      return make_error(HMR_EINVAL, "%s option '%s' is not name=value", adapter,
                        item.name.c_str());
    }
  }
  return items;
}

}  // namespace hmr::nic
