// The report hmr-info builds before it prints anything: a JSON value (null, boolean, number,
// string, array, object with keys in insertion order).  One tree, rendered two ways (--json and
// the text report), so the two can never disagree.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hmr::info {

class JsonValue {
 public:
  enum class Type { null, boolean, integer, unsigned_integer, real, string, array, object };

  JsonValue() = default;  // null
  JsonValue(bool value) : type_(Type::boolean), boolean_(value) {}  // NOLINT
  template <std::signed_integral T>
    requires(!std::same_as<T, bool>)
  JsonValue(T value) : type_(Type::integer), integer_(value) {}  // NOLINT
  template <std::unsigned_integral T>
    requires(!std::same_as<T, bool>)
  JsonValue(T value) : type_(Type::unsigned_integer), unsigned_(value) {}  // NOLINT
  JsonValue(double value) : type_(Type::real), real_(value) {}  // NOLINT
  JsonValue(std::string value) : type_(Type::string), string_(std::move(value)) {}  // NOLINT
  JsonValue(const char* value) : type_(Type::string), string_(value) {}  // NOLINT
  JsonValue(std::string_view value) : type_(Type::string), string_(value) {}  // NOLINT

  static JsonValue object() { return JsonValue(Type::object); }
  static JsonValue array() { return JsonValue(Type::array); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::null; }
  bool is_object() const { return type_ == Type::object; }
  bool is_array() const { return type_ == Type::array; }
  bool is_string() const { return type_ == Type::string; }
  bool is_bool() const { return type_ == Type::boolean; }
  bool is_number() const {
    return type_ == Type::integer || type_ == Type::unsigned_integer || type_ == Type::real;
  }

  // Scalars; the wrong type gives false / 0 / "" rather than a crash.
  bool as_bool() const { return type_ == Type::boolean && boolean_; }
  const std::string& as_string() const { return string_; }
  int64_t as_integer() const;

  // Objects: set() replaces an existing key in place or appends it, and returns the stored
  // value so nested parts can be filled where they sit; the reference lasts until the next
  // set() or push() on this value.  A non-object becomes an empty object.
  JsonValue& set(std::string_view key, JsonValue value);
  const JsonValue* find(std::string_view key) const;
  // The value at a '.'-separated path of object keys ("nics.verbs.reason"), or null.
  const JsonValue* at(std::string_view path) const;
  const std::vector<std::string>& keys() const { return keys_; }

  // Arrays (and an object's values, in key order).  push() makes a non-array an empty array.
  JsonValue& push(JsonValue value);
  const std::vector<JsonValue>& items() const { return items_; }
  size_t size() const { return items_.size(); }

  // Valid JSON (RFC 8259), UTF-8: control characters escaped, bytes that are not UTF-8 written
  // as U+FFFD, non-finite numbers as null.  indent 0 writes one line.
  std::string to_json(int indent = 2) const;

 private:
  explicit JsonValue(Type type) : type_(type) {}
  void write(std::string& out, int indent, int depth) const;

  Type type_ = Type::null;
  bool boolean_ = false;
  int64_t integer_ = 0;
  uint64_t unsigned_ = 0;
  double real_ = 0;
  std::string string_;
  std::vector<std::string> keys_;  // objects: keys_[i] names items_[i]
  std::vector<JsonValue> items_;
};

// A JSON string literal (with quotes) for `text`.
std::string json_quote(std::string_view text);

}  // namespace hmr::info
