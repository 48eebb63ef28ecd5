// One cached NIC registration, shared by every MR handle whose range it contains and whose
// sharing key matches.
#pragma once

#include <atomic>
#include <cstdint>

#include "nic/nic.h"

namespace hmr::core {

// What must match, besides containment, for a request to reuse an entry: the peer must see
// nothing different from a registration of its own.  16 bytes: every cached region carries one,
// so each byte here is a megabyte at a million regions.
struct CacheKey {
  uint64_t alloc_id = 0;    // allocation identity (device buffer id); 0 for host memory
  int32_t device = 0;
  uint16_t access = 0;      // HMR_* access bits, all below bit 15 (validated before caching)
  uint8_t iface = 0;
  uint8_t export_mode : 7 = 0;   // core::ExportMode: how device memory reaches the NIC (0: by address)
  bool exact_start : 1 = false;  // 0-based addressing: byte 0 must be the request's own start

  bool operator==(const CacheKey&) const = default;
};
static_assert(sizeof(CacheKey) == 16);

struct CacheEntry {
  static constexpr uint32_t kInvalid = 1u << 31;  // out of the index; dies with its last user
  static constexpr uint32_t kRefMask = kInvalid - 1;
  // References one entry can carry; a get() beyond it registers anew and hands that out
  // uncached, so the count can never reach kInvalid.
  static constexpr uint32_t kMaxRefs = (1u << 30) - 1;
  // CLOCK recency: 1 when filed, 2 after a hit, lowered by each pass of the hand; 0 makes the
  // entry a victim.
  static constexpr uint8_t kFiledRecency = 1;
  static constexpr uint8_t kHitRecency = 2;

  // References held (the low bits) and kInvalid once the entry has left the index.  A hit
  // counts up, a put() counts down; the put() that leaves kInvalid alone deregisters.
  std::atomic<uint32_t> state{0};
  uint8_t level = 0;        // index level the entry is filed under
  bool subscribed = false;  // its range is watched by the cache's monitor
  bool collected = false;   // on an invalidation's victim list (through `next`)
  std::atomic<uint8_t> recency{0};  // written by hits without ordering; read by the hand
  uintptr_t start = 0;
  uint64_t length = 0;
  CacheKey key;
  nic::Registration registration;
  CacheEntry* next = nullptr;  // dead list, or an invalidation's victim list

  uintptr_t end() const { return start + length; }
  uint32_t references() const { return state.load(std::memory_order_relaxed) & kRefMask; }
  bool contains(uintptr_t first, uint64_t len) const {
    return first >= start && len <= length && first - start <= length - len;
  }
};

}  // namespace hmr::core
