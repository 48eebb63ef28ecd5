// A yes/no answer and its reason, the shape every probe reports in: {"supported", "reason"}.
// The text report recognises it and prints one line ("yes: ..." / "no: ...").
#pragma once

#include <string>

#include "json_value.h"

namespace hmr::info {

inline JsonValue answer(bool supported, std::string reason) {
  JsonValue value = JsonValue::object();
  value.set("supported", supported);
  value.set("reason", std::move(reason));
  return value;
}

inline bool is_answer(const JsonValue& value) {
  return value.is_object() && value.keys().size() == 2 && value.find("supported") != nullptr &&
         value.find("supported")->is_bool() && value.find("reason") != nullptr &&
         value.find("reason")->is_string();
}

}  // namespace hmr::info
