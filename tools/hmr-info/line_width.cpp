#include "line_width.h"

#include "utf8.h"

namespace hmr::info {
namespace {

// C0, DEL and C1: a terminal takes these as commands (ESC starts a sequence, and so does
// U+009B, CSI, on terminals that honour C1), never as text.
bool is_control(char32_t point) { return point < 0x20 || (point >= 0x7f && point <= 0x9f); }

// East Asian wide and fullwidth characters, and emoji, which terminals draw two columns wide
// (Markus Kuhn's wcwidth table, with the emoji blocks taken whole: counting a narrow one as
// two only ends a line early, while the reverse would break the width promised).
bool is_wide(char32_t point) {
  return point >= 0x1100 &&
         (point <= 0x115f || point == 0x2329 || point == 0x232a ||
          (point >= 0x2e80 && point <= 0xa4cf && point != 0x303f) ||
          (point >= 0xac00 && point <= 0xd7a3) || (point >= 0xf900 && point <= 0xfaff) ||
          (point >= 0xfe10 && point <= 0xfe19) || (point >= 0xfe30 && point <= 0xfe6f) ||
          (point >= 0xff00 && point <= 0xff60) || (point >= 0xffe0 && point <= 0xffe6) ||
          (point >= 0x1f000 && point <= 0x1faff) || (point >= 0x20000 && point <= 0x2fffd) ||
          (point >= 0x30000 && point <= 0x3fffd));
}

// The character at text[i] as printed: how many bytes it has, the columns it takes, and
// whether it is shown as it is (else as one '?': a control, or a byte that is not UTF-8).
struct Character {
  size_t bytes;
  size_t columns;
  bool shown;
};

Character character_at(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) return {1, 1, !is_control(lead)};
  const size_t length = utf8_sequence_length(text, i);
  if (length == 0) return {1, 1, false};  // each byte that is not UTF-8 becomes a '?'
  const char32_t point = utf8_code_point(text, i, length);
  if (is_control(point)) return {length, 1, false};
  return {length, is_wide(point) ? size_t{2} : size_t{1}, true};
}

// The byte offset in `text` after at most `count` columns (or the end); a character that
// would cross `count` is left for the next line, never cut.
size_t offset_after_columns(std::string_view text, size_t count) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size();) {
    const Character c = character_at(text, i);
    if (seen + c.columns > count) return i;
    seen += c.columns;
    i += c.bytes;
  }
  return text.size();
}

}  // namespace

size_t columns(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size();) {
    const Character c = character_at(text, i);
    count += c.columns;
    i += c.bytes;
  }
  return count;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Character c = character_at(text, i);
    if (c.shown) {
      out.append(text.substr(i, c.bytes));
    } else {
      out += '?';
    }
    i += c.bytes;
  }
  return out;
}

std::vector<std::string> wrap(std::string_view text, size_t width, std::string_view first_indent,
                              std::string_view indent) {
  const std::string clean = printable(text);
  std::vector<std::string> lines;
  std::string line(first_indent);
  bool line_has_word = false;
  std::string_view rest(clean);
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    std::string_view word = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    if (word.empty()) continue;
    for (;;) {
      const size_t needed = columns(line) + (line_has_word ? 1 : 0) + columns(word);
      if (needed <= width) {
        if (line_has_word) line += ' ';
        line += word;
        line_has_word = true;
        break;
      }
      if (line_has_word) {  // the word goes onto a line of its own
        lines.push_back(std::move(line));
        line = std::string(indent);
        line_has_word = false;
        continue;
      }
      // Longer than a whole line: as much as fits, the rest on the next.  (At least one
      // character, so a line too narrow for a wide one still moves on.)
      const size_t room = width > columns(line) ? width - columns(line) : 0;
      size_t cut = offset_after_columns(word, room);
      if (cut == 0) cut = character_at(word, 0).bytes;
      line += word.substr(0, cut);
      word.remove_prefix(cut);
      line_has_word = true;
      if (word.empty()) break;
      lines.push_back(std::move(line));
      line = std::string(indent);
      line_has_word = false;
    }
  }
  if (line_has_word || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

}  // namespace hmr::info
