// Reading the public attribute structs, whose first field is their size, so the ABI can grow:
// a caller compiled against an older, shorter struct is read up to its size (the rest keeps
// defaults); a newer, longer one is accepted when the bytes this library does not know are 0.
#pragma once

#include <cstring>

#include "util/status.h"

namespace hmr::core {

template <typename T>
Result<T> read_extensible(const T* user, size_t first_version_size, const char* type_name) {
  if (user == nullptr) return make_error(HMR_EINVAL, "%s pointer is NULL", type_name);
  const size_t size = user->size;
  // A size no struct of this ABI will reach is garbage, not a newer caller: refuse it rather
  // than read that far.
  constexpr size_t kLargestPlausible = 4096;
  if (size > kLargestPlausible) {
    return make_error(HMR_EINVAL, "%s.size is %zu; set it to sizeof(struct %s) (%zu)", type_name,
                      size, type_name, sizeof(T));
  }
  if (size < first_version_size) {
    return make_error(HMR_EINVAL, "%s.size is %zu; set it to sizeof(struct %s) (%zu)", type_name,
                      size, type_name, sizeof(T));
  }
  T copy{};
  std::memcpy(&copy, user, size < sizeof(T) ? size : sizeof(T));
  const auto* tail = reinterpret_cast<const unsigned char*>(user);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (tail[i] != 0) {
      return make_error(HMR_EINVAL,
                        "%s.size is %zu but this hmr knows %zu bytes and byte %zu is set: the "
                        "caller needs a newer hmr",
                        type_name, size, sizeof(T), i);
    }
  }
  return copy;
}

// Writes back what the caller's struct has room for.
template <typename T>
void write_extensible(T* user, const T& value) {
  const size_t size = user->size;
  std::memcpy(user, &value, size < sizeof(T) ? size : sizeof(T));
  user->size = size;
}

}  // namespace hmr::core
