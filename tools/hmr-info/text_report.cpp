#include "text_report.h"

#include <algorithm>

#include "answer.h"
#include "first_screen.h"
#include "line_width.h"
#include "summary.h"

namespace hmr::info {
namespace {

const char* section_title(const std::string& key) {
  if (key == "ifaces") return "Memory interfaces (ifaces)";
  if (key == "devices") return "Devices";
  if (key == "nics") return "NIC side (nics)";
  if (key == "monitors") return "Cache monitors (monitors)";
  if (key == "config") return "Effective settings (config)";
  return nullptr;
}

bool is_scalar(const JsonValue& value) { return !value.is_object() && !value.is_array(); }

bool is_scalar_array(const JsonValue& value) {
  return value.is_array() &&
         std::all_of(value.items().begin(), value.items().end(), is_scalar);
}

std::string inline_text(const JsonValue& value);

// Longer lists of scalars get a line per item.
constexpr size_t kInlineListWidth = 100;

// Printed on the key's own line: scalars, answers, short lists of scalars.
bool is_inline(const JsonValue& value) {
  if (is_scalar_array(value)) return inline_text(value).size() <= kInlineListWidth;
  return is_scalar(value) || is_answer(value) || (value.is_object() && value.keys().empty());
}

std::string scalar_text(const JsonValue& value) {
  switch (value.type()) {
    case JsonValue::Type::null: return "-";
    case JsonValue::Type::boolean: return value.as_bool() ? "yes" : "no";
    case JsonValue::Type::string: return value.as_string().empty() ? "-" : value.as_string();
    default: {
      std::string json = value.to_json(0);
      return json;
    }
  }
}

std::string inline_text(const JsonValue& value) {
  if (is_answer(value)) {
    const std::string& reason = value.find("reason")->as_string();
    const char* verdict = value.find("supported")->as_bool() ? "yes" : "no";
    return reason.empty() ? verdict : std::string(verdict) + ": " + reason;
  }
  if (value.is_array() || value.is_object()) {
    if (value.items().empty()) return "none";
    std::string text;
    for (const JsonValue& item : value.items()) {
      text += (text.empty() ? "" : ", ") + scalar_text(item);
    }
    return text;
  }
  return scalar_text(value);
}

// Every line of the report goes through here: a value (an environment variable's, a
// runtime's reason) is shown printable, as on the first screen.
void line(std::string& out, int indent, const std::string& text) {
  out.append(static_cast<size_t>(indent), ' ');
  out += printable(text);
  out += '\n';
}

void render_block(std::string& out, const JsonValue& object, int indent, bool skip_name);

void render_elements(std::string& out, const JsonValue& array, int indent) {
  if (array.items().empty()) {
    line(out, indent, "none");
    return;
  }
  for (const JsonValue& item : array.items()) {
    if (!item.is_object()) {
      line(out, indent, "- " + inline_text(item));
      continue;
    }
    const JsonValue* name = item.find("name");
    const bool titled = name != nullptr && name->is_string();
    if (titled) line(out, indent, name->as_string());
    render_block(out, item, titled ? indent + 2 : indent, titled);
  }
}

void render_block(std::string& out, const JsonValue& object, int indent, bool skip_name) {
  size_t width = 0;
  for (const std::string& key : object.keys()) width = std::max(width, key.size());
  for (size_t i = 0; i < object.keys().size(); ++i) {
    const std::string& key = object.keys()[i];
    const JsonValue& value = object.items()[i];
    if (skip_name && key == "name") continue;
    if (is_inline(value)) {
      line(out, indent, key + ":" + std::string(width - key.size() + 1, ' ') + inline_text(value));
      continue;
    }
    line(out, indent, key + ":");
    if (value.is_array()) {
      render_elements(out, value, indent + 2);
    } else {
      render_block(out, value, indent + 2, false);
    }
  }
}

}  // namespace

std::string render_text(const JsonValue& report) {
  std::string out = render_first_screen(report);
  out += "\nSummary, each reason in full\n";
  // Each reason in full, but in lines of the first screen's width: a line per runtime, its
  // continuation indented under it.
  for (const std::string& summary : summary_lines(report)) {
    size_t start = 0;
    for (size_t end = 0; start <= summary.size(); start = end + 1) {
      end = summary.find('\n', start);
      if (end == std::string::npos) end = summary.size();
      const bool first = start == 0;
      for (const std::string& piece : wrap(summary.substr(start, end - start), kScreenWidth,
                                           first ? "  " : "    ", first ? "    " : "      ")) {
        out += piece;
        out += '\n';
      }
    }
  }
  for (size_t i = 0; i < report.keys().size(); ++i) {
    const char* title = section_title(report.keys()[i]);
    if (title == nullptr) continue;
    out += '\n';
    out += title;
    out += '\n';
    const JsonValue& section = report.items()[i];
    if (section.is_array()) {
      render_elements(out, section, 2);
    } else {
      render_block(out, section, 2, false);
    }
  }
  return out;
}

}  // namespace hmr::info
