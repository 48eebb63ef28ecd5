// Reading the finished report tree by path, for the parts of hmr-info that summarise it (the
// first screen, the summary lines): a missing or mistyped value reads as empty, never a crash,
// so a summary can only leave out what the report lacks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "json_value.h"

namespace hmr::info {

inline const std::string& text_at(const JsonValue& node, std::string_view path) {
  static const std::string kEmpty;
  const JsonValue* value = node.at(path);
  return value != nullptr && value->is_string() ? value->as_string() : kEmpty;
}

inline bool bool_at(const JsonValue& node, std::string_view path) {
  const JsonValue* value = node.at(path);
  return value != nullptr && value->as_bool();
}

inline const std::vector<JsonValue>& items_at(const JsonValue& node, std::string_view path) {
  static const std::vector<JsonValue> kNone;
  const JsonValue* value = node.at(path);
  return value != nullptr && value->is_array() ? value->items() : kNone;
}

inline std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : separator) + part;
  return text;
}

}  // namespace hmr::info
