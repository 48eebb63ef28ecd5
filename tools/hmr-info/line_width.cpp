#include "line_width.h"

namespace hmr::info {
namespace {

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; }

// The byte offset in `text` after `count` columns (or the end).
size_t offset_after_columns(std::string_view text, size_t count) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (continuation_byte(text[i])) continue;
    if (seen == count) return i;
    ++seen;
  }
  return text.size();
}

}  // namespace

size_t columns(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += continuation_byte(c) ? 0 : 1;
  return count;
}

std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) c = '?';
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
      // Longer than a whole line: as much as fits, the rest on the next.
      const size_t room = width > columns(line) ? width - columns(line) : 1;
      const size_t cut = offset_after_columns(word, room);
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
