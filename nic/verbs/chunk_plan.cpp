#include "nic/verbs/chunk_plan.h"

#include <bit>
#include <cstring>

namespace hmr::verbs {

uint64_t chunk_length_for(uint64_t max_mr_size) {
  if (max_mr_size == 0) return uint64_t{1} << 63;
  return std::bit_floor(max_mr_size);
}

std::vector<Chunk> plan_chunks(uint64_t length, uint64_t chunk_len) {
  std::vector<Chunk> chunks;
  uint64_t offset = 0;
  do {
    const uint64_t left = length - offset;
    chunks.push_back({offset, left < chunk_len ? left : chunk_len});
    offset += chunks.back().length;
  } while (offset < length);
  return chunks;
}

uint64_t max_chunked_length(uint64_t chunk_len, size_t max_chunks) {
  if (chunk_len > UINT64_MAX / max_chunks) return UINT64_MAX;
  return chunk_len * max_chunks;
}

KeyBytes encode_raw_key(std::span<const uint32_t> rkeys, uint64_t chunk_len) {
  KeyBytes key;
  key.size = kRawKeySize;
  for (size_t i = 0; i < rkeys.size() && i < kMaxRawKeyChunks; ++i) {
    for (size_t byte = 0; byte < 4; ++byte) {
      key.bytes[4 * i + byte] = static_cast<uint8_t>(rkeys[i] >> (8 * byte));
    }
  }
  key.bytes[12] = static_cast<uint8_t>(rkeys.size());
  key.bytes[13] = static_cast<uint8_t>(std::countr_zero(chunk_len));
  return key;
}

Result<DecodedRawKey> decode_raw_key(const KeyBytes& key) {
  const size_t count = key.bytes[12];
  if (key.size != kRawKeySize || count == 0 || count > kMaxRawKeyChunks || key.bytes[13] > 63 ||
      key.bytes[14] != 0 || key.bytes[15] != 0) {
    return make_error(HMR_EINVAL, "not a verbs RAW key (%zu bytes, %zu chunks)", key.size, count);
  }
  DecodedRawKey decoded;
  decoded.chunk_len = uint64_t{1} << key.bytes[13];
  for (size_t i = 0; i < count; ++i) {
    uint32_t rkey = 0;
    for (size_t byte = 0; byte < 4; ++byte) {
      rkey |= static_cast<uint32_t>(key.bytes[4 * i + byte]) << (8 * byte);
    }
    decoded.rkeys.push_back(rkey);
  }
  return decoded;
}

}  // namespace hmr::verbs
