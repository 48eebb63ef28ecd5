// UTF-8 as RFC 3629 defines it, for what hmr-info prints: a reason or an environment value
// may hold any bytes, and both the JSON and the terminal keep only well-formed characters.
#pragma once

#include <cstddef>
#include <string_view>

namespace hmr::info {

// Length of the well-formed UTF-8 sequence of two or more bytes at text[i], or 0 when it is
// not one (an ASCII byte, a stray continuation byte, an overlong form, a surrogate, a code
// point past U+10FFFF, a sequence cut short).
size_t utf8_sequence_length(std::string_view text, size_t i);

// The code point of the well-formed sequence of `length` bytes at text[i].
char32_t utf8_code_point(std::string_view text, size_t i, size_t length);

}  // namespace hmr::info
