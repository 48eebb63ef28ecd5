// A caller may store any int in a C enum field; loading an out-of-range value through the
// enum type is undefined in C++, so validation reads the bits as an int first.
#pragma once

#include <cstring>

namespace hmr::core {

template <typename Enum>
int enum_bits(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums of the ABI are int-sized");
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace hmr::core
