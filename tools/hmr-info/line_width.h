// Lines that fit a terminal: the first screen of hmr-info promises at most kScreenWidth
// columns per line, whatever a runtime's reason or an environment value holds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hmr::info {

inline constexpr size_t kScreenWidth = 100;

// Columns `text` takes once printable: two for an East Asian wide or fullwidth character or
// an emoji, one for any other character, and one for each '?' printable() puts in (hmr-info's
// own words are ASCII; a value from the environment may hold anything).
size_t columns(std::string_view text);

// `text` with control characters (C0 such as a tab or ESC, DEL, and C1 such as U+009B, CSI)
// and each byte that is not well-formed UTF-8 shown as '?', so what is printed is what is
// counted and nothing reaches the terminal as a command.
std::string printable(std::string_view text);

// `text` (made printable) broken at spaces into lines of at most `width` columns; the first
// line begins with `first_indent`, the others with `indent`.  A word longer than a line is cut
// between characters.
std::vector<std::string> wrap(std::string_view text, size_t width, std::string_view first_indent,
                              std::string_view indent);

}  // namespace hmr::info
