// FNV-1a, 32 bits: a checksum that catches random and truncated bytes in what peers send (not a
// defence against forgery; the nonce and the fabric's own checks are).
#pragma once

#include <cstdint>
#include <span>

namespace hmr::nccl {

inline uint32_t fnv1a(std::span<const uint8_t> bytes, uint32_t hash = 2166136261u) {
  for (uint8_t byte : bytes) hash = (hash ^ byte) * 16777619u;
  return hash;
}

}  // namespace hmr::nccl
