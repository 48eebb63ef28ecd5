// One cached NIC registration, shared by every MR handle whose range it contains and whose
// sharing key matches.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "cache/owner_counts.h"
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
  // An entry's life, all in `state` and changed only by atomic read-modify-writes (until the
  // pool recycles it after a grace period: cache/entry_pool.h), so that a reader holding a
  // stale pointer to it (a slot it read as a writer moved or emptied it) can add a reference,
  // look, and take it back at any moment without losing anyone's count:
  //   free (kZero)  --allocate-->  claimed, with its allocator's reference (kClaimed | kZero+1)
  //   claimed   --filed in the index-->  live (kLive | kClaimed | kZero+n)
  //   live      --out of the index-->  claimed again (kClaimed | kZero+n)
  //   claimed and unreferenced  --claim_finalization()-->  kZero: deregistered, to the pool
  // Only a live entry may be handed out; a reader that finds any other state takes its
  // reference back.  Whoever may have dropped the last reference of an entry that is not
  // live asks claim_finalization(); exactly one caller wins and finalizes.
  //
  // References come in two kinds.  Shared ones are counted in `state`, with one locked add
  // and one locked subtract.  The thread that filed the entry (its `owner`) counts its own in
  // a table of its own instead (cache/owner_counts.h), with plain stores and a compiler
  // barrier (util/asymmetric_fence.h): no locked instruction, so a hit does not serialize the
  // CPU, and the count costs the entry no bytes.  An entry's references are (state's count -
  // kZero) + OwnerCounts::of(owner, entry).  The count in `state` may drop below kZero: an
  // owner's reference closed by another thread is given back there, as the owner's count
  // cannot be written by others.  That debt would grow on an entry whose owner registers and
  // another thread closes (a completion thread), so the owner repays it into `state` once it
  // passes kMaxDebt (RegistrationCache::repay_debt).  Deciding that an entry is unreferenced
  // needs the owner's count, which its owner stores without a fence: a thread other than the
  // owner reads it only after heavy_fence(), and the owner, once it sees the entry not live,
  // uses full fences (registration_cache.h).
  static constexpr uint32_t kLive = 1u << 31;
  static constexpr uint32_t kClaimed = 1u << 30;
  static constexpr uint32_t kRefMask = kClaimed - 1;
  static constexpr uint32_t kZero = 1u << 29;  // the count in `state` that means none
  // References one entry can carry, both kinds together; a get() beyond it registers anew and
  // hands that out uncached.  Below kZero by half of it: adds racing past the limit (each
  // undone at once) never carry into kClaimed.
  static constexpr uint32_t kMaxRefs = (1u << 28) - 1;
  // Owner references given back in `state` (its count below kZero by this much) before the
  // owner moves them out of its own count: far below kZero, so the count never borrows from
  // kClaimed; below OwnerCounts::kMaxCount, which the owner's count (and so the debt) cannot
  // pass; and rare enough that the owner's hit path pays for it once per 32k hits.
  static constexpr uint32_t kMaxDebt = 1u << 15;
  static constexpr uint8_t kFiledRecency = 1;
  static constexpr uint8_t kHitRecency = 2;

  // kZero + shared references (the low bits), kClaimed and kLive: see above.
  std::atomic<uint32_t> state{kZero};
  // The owning thread's ThreadSlot::owner_id() (0: none, every reference is shared).  Set
  // before filing; read by hits, which take owner references only when it is theirs.
  uint8_t owner = 0;
  // Both set before filing (and by reset()), read while filed: one byte, no writer beside.
  uint8_t level : 2 = 0;          // index level the entry is filed under (BlockIndex::kLevels)
  uint8_t key_size : 6 = 0;       // bytes of key_bytes in use (up to KeyBytes::kMaxSize)
  // A memory location of its own for the bits below, which the writer changes while readers
  // read the byte above: adjacent bit-fields are one location unless something parts them.
  uint8_t : 0;
  bool subscribed : 1 = false;    // its range is watched by the cache's monitor
  bool collected : 1 = false;     // on an invalidation's victim list (through `next`); both
                                  // bits change only before filing or under the exclusive lock
  std::atomic<uint8_t> recency{0};  // written by hits without ordering; read by the hand
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
  CacheEntry* next = nullptr;  // dead list, an invalidation's victim list, or the pool's free list

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
  // A moment's count of both kinds, for heuristics (eviction, statistics): the owner's part
  // may be behind by what its owner has not yet made visible.
  uint32_t references() const {
    return references(state.load(std::memory_order_relaxed), OwnerCounts::of(owner, this));
  }
  // The references `seen` (a value of state) and the owner's count `owned` add up to.
  static uint32_t references(uint32_t seen, uint32_t owned) {
    return (seen & kRefMask) - kZero + owned;
  }
  // Whether `seen` with the owner's count `owned` describes an entry out of the index that
  // nobody references: it may be finalized, if claim_finalization(seen) wins.
  static bool unreferenced(uint32_t seen, uint32_t owned) {
    return (seen & (kLive | kClaimed)) == kClaimed && references(seen, owned) == 0;
  }
  bool contains(uintptr_t first, uint64_t len) const {
    return first >= start && len <= length && first - start <= length - len;
  }
  // True for exactly one caller of those that saw the same unreferenced state.
  bool claim_finalization(uint32_t seen) {
    return state.compare_exchange_strong(seen, kZero, std::memory_order_acq_rel);
  }
  // Whether a request for [first, first+len) with `wanted` may share this registration.
  bool matches(uintptr_t first, uint64_t len, const CacheKey& wanted) const {
    return contains(first, len) && (!wanted.exact_start || start == first) && same_key(wanted);
  }
  // The key compared as two words: the defaulted operator== compares field by field, and the
  // hit path pays for every instruction.  CacheKey has no padding (static_assert above).
  bool same_key(const CacheKey& wanted) const {
    uint64_t mine[2], theirs[2];
    std::memcpy(mine, &key, sizeof mine);
    std::memcpy(theirs, &wanted, sizeof theirs);
    return ((mine[0] ^ theirs[0]) | (mine[1] ^ theirs[1])) == 0;
  }
  // Back to a fresh, claimed entry with one shared reference, its allocator's.  Only after a
  // grace period since it was finalized (cache/entry_pool.h): no reader still holds it.
  void reset() {
    state.store(kClaimed | (kZero + 1), std::memory_order_relaxed);
    OwnerCounts::forget(owner, this);  // a count its last owner left offset by a debt
    owner = 0;
    level = 0;
    subscribed = false;
    collected = false;
    recency.store(0, std::memory_order_relaxed);
    key_size = 0;
    start = 0;
    length = 0;
    key = CacheKey{};
    desc = nullptr;
    std::memset(key_bytes, 0, sizeof key_bytes);
    handle = nullptr;
    base_addr = 0;
    next = nullptr;
  }
};
static_assert(sizeof(CacheEntry) == 88, "every byte of an entry costs a megabyte at 1M regions");
static_assert(KeyBytes::kMaxSize < 64, "key_size has 6 bits");

}  // namespace hmr::core
