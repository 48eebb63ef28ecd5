// One cached NIC registration, shared by every MR handle whose range it contains and whose
// sharing key matches.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

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
  uint8_t export_mode : 7 = 0;   // core::ExportMode: how device memory reaches the NIC
                                 // (0: by address)
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
  uint8_t level = 0;              // index level the entry is filed under
  bool subscribed : 1 = false;    // its range is watched by the cache's monitor
  bool collected : 1 = false;     // on an invalidation's victim list (through `next`); both
                                  // bits change only before filing or under the exclusive lock
  std::atomic<uint8_t> recency{0};  // written by hits without ordering; read by the hand
  uint8_t key_size = 0;           // bytes of key_bytes in use
  uintptr_t start = 0;
  uint64_t length = 0;
  CacheKey key;
  // The NIC's registration, kept in parts rather than as a nic::Registration, whose padding a
  // million entries would pay for.  What a hit hands out (desc, key) follows the range and key
  // that find() reads, so a hit reads the first 64 bytes of the entry only.
  void* desc = nullptr;
  uint8_t key_bytes[KeyBytes::kMaxSize] = {};
  void* handle = nullptr;
  uint64_t base_addr = 0;
  CacheEntry* next = nullptr;  // dead list, or an invalidation's victim list

  uintptr_t end() const { return start + length; }
  void set_registration(const nic::Registration& registration) {
    desc = registration.desc;
    handle = registration.handle;
    base_addr = registration.base_addr;
    key_size = static_cast<uint8_t>(registration.key.size);
    std::memcpy(key_bytes, registration.key.bytes, sizeof key_bytes);
  }
  nic::Registration registration() const {
    nic::Registration registration;
    registration.desc = desc;
    registration.handle = handle;
    registration.base_addr = base_addr;
    registration.key.size = key_size;
    std::memcpy(registration.key.bytes, key_bytes, sizeof key_bytes);
    return registration;
  }
  // The key's low 64 bits, as KeyBytes::low_u64 gives them.
  uint64_t key_low_u64() const { return KeyBytes::low_u64_of(key_bytes, key_size); }
  uint32_t references() const { return state.load(std::memory_order_relaxed) & kRefMask; }
  bool contains(uintptr_t first, uint64_t len) const {
    return first >= start && len <= length && first - start <= length - len;
  }
};
static_assert(sizeof(CacheEntry) == 88, "every byte of an entry costs a megabyte at 1M regions");

}  // namespace hmr::core
