// A memory-region key as the NIC sees it: up to 16 bytes (RAW keys are wider than 64 bits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hmr {

struct KeyBytes {
  static constexpr size_t kMaxSize = 16;
  uint8_t bytes[kMaxSize] = {};
  size_t size = 0;

  static KeyBytes from_u64(uint64_t key, size_t size) {
    KeyBytes k;
    k.size = size;
    std::memcpy(k.bytes, &key, size < sizeof key ? size : sizeof key);
    return k;
  }
  // The low 64 bits (little-endian), the part a non-RAW key consists of.
  uint64_t low_u64() const { return low_u64_of(bytes, size); }
  // The same of key bytes kept elsewhere (a cache entry keeps them without KeyBytes' padding).
  // `key_bytes` holds kMaxSize bytes, so all eight are read and the unused ones masked: a
  // memcpy of a variable size is a call, and the hit path copies every key.
  static uint64_t low_u64_of(const uint8_t* key_bytes, size_t key_size) {
    static_assert(kMaxSize >= sizeof(uint64_t));
    uint64_t key;
    std::memcpy(&key, key_bytes, sizeof key);
    if (key_size < sizeof key) key &= (uint64_t{1} << (8 * key_size)) - 1;
    return key;
  }
  bool operator==(const KeyBytes& other) const {
    return size == other.size && std::memcmp(bytes, other.bytes, size) == 0;
  }
};

}  // namespace hmr
