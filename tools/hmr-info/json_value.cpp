#include "json_value.h"

#include <cmath>
#include <cstdio>

#include "utf8.h"

namespace hmr::info {
namespace {

void newline(std::string& out, int indent, int depth) {
  if (indent <= 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

int64_t JsonValue::as_integer() const {
  switch (type_) {
    case Type::integer: return integer_;
    case Type::unsigned_integer:
      return unsigned_ > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                          : static_cast<int64_t>(unsigned_);
    case Type::real: return std::isfinite(real_) ? static_cast<int64_t>(real_) : 0;
    default: return 0;
  }
}

JsonValue& JsonValue::set(std::string_view key, JsonValue value) {
  if (type_ != Type::object) *this = object();
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) {
      items_[i] = std::move(value);
      return items_[i];
    }
  }
  keys_.emplace_back(key);
  items_.push_back(std::move(value));
  return items_.back();
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (type_ != Type::object) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &items_[i];
  }
  return nullptr;
}

const JsonValue* JsonValue::at(std::string_view path) const {
  const JsonValue* node = this;
  while (node != nullptr && !path.empty()) {
    const size_t dot = path.find('.');
    node = node->find(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node;
}

JsonValue& JsonValue::push(JsonValue value) {
  if (type_ != Type::array) *this = array();
  items_.push_back(std::move(value));
  return items_.back();
}

std::string JsonValue::to_json(int indent) const {
  std::string out;
  write(out, indent, 0);
  if (indent > 0) out += '\n';
  return out;
}

void JsonValue::write(std::string& out, int indent, int depth) const {
  switch (type_) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += boolean_ ? "true" : "false"; return;
    case Type::integer: out += std::to_string(integer_); return;
    case Type::unsigned_integer: out += std::to_string(unsigned_); return;
    case Type::real: {
      if (!std::isfinite(real_)) {
        out += "null";
        return;
      }
      char text[32];
      std::snprintf(text, sizeof text, "%.17g", real_);
      out += text;
      return;
    }
    case Type::string: out += json_quote(string_); return;
    case Type::array:
    case Type::object: break;
  }
  const bool is_obj = type_ == Type::object;
  out += is_obj ? '{' : '[';
  if (items_.empty()) {
    out += is_obj ? '}' : ']';
    return;
  }
  for (size_t i = 0; i < items_.size(); ++i) {
    if (i > 0) out += ',';
    newline(out, indent, depth + 1);
    if (is_obj) {
      out += json_quote(keys_[i]);
      out += indent > 0 ? ": " : ":";
    }
    items_[i].write(out, indent, depth + 1);
  }
  newline(out, indent, depth);
  out += is_obj ? '}' : ']';
}

}  // namespace hmr::info
