// 32 bits that stand for a CacheKey; the index folds them into the 11-bit filter of its slots,
// and keeps an exact host tag whole in slots that serve hits alone (cache/block_index.h); any
// other match is confirmed against the entry's own key.
//
// A host key — every field other than access and exact_start as a default CacheKey has it —
// is encoded exactly, so host keys that differ (in access, say) never share a tag.  Any other
// key (device memory, an allocation id) gets a hash with kHashed set.  "Simple" is decided
// field by field, in registers: a copy of the key with two fields cleared, compared whole,
// made every lookup wait for its own stores (a 16-byte load over narrower stores is not
// forwarded): 6-7 ns more per device hit and ~1 ns per host hit on the fake-driver bench.
// A field CacheKey grows must be added to of(): the size check below fails first.
#pragma once

#include <cstdint>

#include "cache/cache_entry.h"

namespace hmr::core {

struct KeyTag {
  static constexpr uint32_t kHashed = 1u << 31;
  // Bits 29-30 are kept clear (an exact tag is the access bits and kExactStart only).
  static constexpr uint32_t kIndexBits = 3u << 29;
  static constexpr uint32_t kExactStart = 1u << 28;
  static constexpr uint32_t kAccessBits = kExactStart - 1;  // HMR_* access bits end at bit 13
  static constexpr uint32_t kHashBits = kExactStart | kAccessBits;

  static uint32_t of(const CacheKey& key) {
    static_assert(sizeof(CacheKey) == 16, "a new CacheKey field: add it to the test below");
    if (key.alloc_id == 0 && key.device == 0 && key.iface == 0 && key.export_mode == 0 &&
        (key.access & ~kAccessBits) == 0) {
      return key.access | (key.exact_start ? kExactStart : 0);
    }
    return kHashed | (hash(key) & kHashBits);
  }
  static bool is_exact(uint32_t tag) { return (tag & kHashed) == 0; }

 private:
  // Only a filter (matches are confirmed), so it may leave out fields added later.
  static uint32_t hash(const CacheKey& key) {
    uint64_t h = key.alloc_id * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<uint64_t>(key.access) << 32 | static_cast<uint32_t>(key.device)) *
         0xC2B2AE3D27D4EB4FULL;
    h ^= (static_cast<uint64_t>(key.iface) << 1 | (key.exact_start ? 1 : 0)) *
         0x165667B19E3779F9ULL;
    return static_cast<uint32_t>(h >> 32) ^ static_cast<uint32_t>(h);
  }
};

}  // namespace hmr::core
