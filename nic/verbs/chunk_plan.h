// Registrations longer than a device's max_mr_size are split into chunks, each its own verbs MR
// with its own keys.  Chunks are a power of two long, so a peer finds the chunk of a remote
// address with a shift: chunk i covers [start + i * chunk_len, start + (i + 1) * chunk_len).
//
// A peer needs every chunk's rkey.  A 4-byte key names one MR, so a multi-chunk registration that
// peers may reach needs RAW keys (nic_options raw_keys=on): 16 bytes laid out as
//   bytes 0..11   the rkeys of chunks 0, 1, 2 (little-endian uint32; unused ones 0)
//   byte  12      the number of chunks (1..3)
//   byte  13      log2(chunk_len)
//   bytes 14..15  0
// so the first four bytes are always chunk 0's rkey.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "nic/key_bytes.h"
#include "util/status.h"

namespace hmr::verbs {

inline constexpr size_t kRawKeySize = 16;
inline constexpr size_t kMaxRawKeyChunks = 3;
// Local-only registrations have no key to fit; the limit only bounds the per-MR chunk table.
inline constexpr size_t kMaxLocalChunks = 1024;

// The largest power of two not above max_mr_size (a device reporting 0 is taken as unlimited).
uint64_t chunk_length_for(uint64_t max_mr_size);

struct Chunk {
  uint64_t offset;  // from the start of the registered range
  uint64_t length;
};

// The chunks of a `length`-byte range (at least one).
std::vector<Chunk> plan_chunks(uint64_t length, uint64_t chunk_len);

// The largest registration chunks of `chunk_len` can make with at most `max_chunks` chunks.
uint64_t max_chunked_length(uint64_t chunk_len, size_t max_chunks);

KeyBytes encode_raw_key(std::span<const uint32_t> rkeys, uint64_t chunk_len);

struct DecodedRawKey {
  std::vector<uint32_t> rkeys;
  uint64_t chunk_len = 0;
};
// HMR_EINVAL when `key` is not a verbs RAW key.
Result<DecodedRawKey> decode_raw_key(const KeyBytes& key);

}  // namespace hmr::verbs
