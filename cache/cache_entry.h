// One cached NIC registration, shared by every MR handle whose range it contains and whose
// sharing key matches.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "cache/owner_counts.h"
#include "nic/nic.h"
#include "util/thread_slot.h"

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

  // The same key, built in two 64-bit registers and stored whole: a hit path that builds its
  // key field by field (narrow stores) and then reads fields of it together (one wide load,
  // as compilers merge the comparisons of KeyTag::of) waits for the stores to drain, since
  // the CPU forwards a load only from one store that contains it.  The layout is the x86-64
  // and AArch64 psABIs' (fields in order, bit-fields from the low bit);
  // CacheKeyTest.BuiltWholeEqualsBuiltFieldByField checks it on the compiler at hand.
  static CacheKey whole(uint64_t alloc_id, int32_t device, uint16_t access, uint8_t iface,
                        uint8_t export_mode, bool exact_start) {
    const uint64_t words[2] = {
        alloc_id, uint64_t{static_cast<uint32_t>(device)} | uint64_t{access} << 32 |
                      uint64_t{iface} << 48 |
                      uint64_t{static_cast<uint8_t>((export_mode & 0x7f) |
                                                    (exact_start ? 0x80 : 0))}
                          << 56};
    CacheKey key;
    std::memcpy(static_cast<void*>(&key), words, sizeof key);
    return key;
  }
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
  // and one locked subtract.  A thread that owns a ThreadSlot outright counts its own in a
  // table of its own instead (cache/owner_counts.h), with plain stores and a compiler barrier
  // (util/asymmetric_fence.h): no locked instruction and no touch of the entry, so a hit can
  // be served from the index slot alone (cache/block_index.h).  The thread that filed the
  // entry is its `owner`; any other thread that counts a reference in its own table sets
  // `held_elsewhere` before it trusts that count (before its second look at the slot), so a
  // count a retirer misses was never handed out.  So an entry's references are (state's count
  // - kZero) + the owner's count, + every thread's count when held_elsewhere (thread_counts()).
  // The count in `state` may drop below kZero: a reference counted in one thread's table and
  // closed by another is given back there, as a thread's table cannot be written by others.
  // That debt is bounded by the counts it offsets (each at most OwnerCounts::kMaxCount), and
  // a thread whose count reaches kMaxDebt repays it (RegistrationCache::repay_debt).  Deciding
  // that an entry is unreferenced needs those counts, which their threads store without a
  // fence: another thread reads them only after heavy_fence() (registration_cache.h).
  static constexpr uint32_t kLive = 1u << 31;
  static constexpr uint32_t kClaimed = 1u << 30;
  static constexpr uint32_t kRefMask = kClaimed - 1;
  static constexpr uint32_t kZero = 1u << 29;  // the count in `state` that means none
  // References one entry can carry, both kinds together; a get() beyond it registers anew and
  // hands that out uncached.  Below kZero by half of it: adds racing past the limit (each
  // undone at once) never carry into kClaimed.
  static constexpr uint32_t kMaxRefs = (1u << 28) - 1;
  // A thread's count at which its hits stop counting there and take the slow path, which
  // repays what other threads gave back in `state` for it (debt): far below kZero, so with 64
  // threads' debts the count never borrows from kClaimed; below OwnerCounts::kMaxCount; and
  // rare enough that a thread's hit path pays for it once per 32k hits at most.
  static constexpr uint32_t kMaxDebt = 1u << 15;

  // kZero + shared references (the low bits), kClaimed and kLive: see above.
  std::atomic<uint32_t> state{kZero};
  // The filing thread's ThreadSlot::owner_id() (0: a thread without a slot of its own).  Set
  // before filing; also in the entry's index slots, where hits read it.
  uint8_t owner : 7 = 0;
  // The bits up to the zero-width field are set before filing (and by reset()) and read while
  // filed: no writer beside.
  bool long_record : 1 = false;    // `handle` is a LongRecord: key or base did not fit here
  uint8_t level : 2 = 0;           // index level the entry is filed under (BlockIndex::kLevels)
  uint8_t key_size : 5 = 0;        // bytes of the NIC's key (up to KeyBytes::kMaxSize)
  bool base_at_start : 1 = false;  // the registration's base_addr is `start` (else 0)
  // A memory location of its own for the bits below, which the writer changes while readers
  // read the byte above: adjacent bit-fields are one location unless something parts them.
  uint8_t : 0;
  bool subscribed : 1 = false;    // its range is watched by the cache's monitor
  bool collected : 1 = false;     // on an invalidation's victim list (through `next`); these
                                  // bits change only before filing or under the exclusive lock
  // Set (never cleared while the entry lives) by a thread other than the owner before it
  // counts a reference in its own table: retirement must then read every thread's table.
  std::atomic<uint8_t> held_elsewhere{0};
  uintptr_t start = 0;
  uint64_t length = 0;
  CacheKey key;
  // The NIC's registration, in parts rather than as a nic::Registration (40 bytes with
  // padding): every byte here is a megabyte at a million regions.  The index slots carry
  // desc and the key's low bytes as well, for hits; the entry keeps them for deregistration,
  // uncached registrations and MRs that need the whole registration.  A key longer than 8
  // bytes or a base that is neither the start nor 0 moves, with the NIC's handle, into a
  // LongRecord of its own.
  void* desc = nullptr;
  uint64_t key_low = 0;
  void* handle = nullptr;        // the NIC's, or a LongRecord (long_record)
  CacheEntry* next = nullptr;  // dead list, an invalidation's victim list, or the pool's free list

  struct LongRecord {
    void* handle;
    uint64_t base_addr;
    KeyBytes key;
  };

  uintptr_t end() const { return start + length; }
  // False, with nothing kept, when a LongRecord was needed and memory for it was not there.
  bool set_registration(const nic::Registration& registration) {
    desc = registration.desc;
    key_low = registration.key.low_u64();
    key_size = static_cast<uint8_t>(registration.key.size);
    base_at_start = registration.base_addr == start;
    if (registration.key.size <= sizeof key_low &&
        (base_at_start || registration.base_addr == 0)) {
      handle = registration.handle;
      return true;
    }
    auto* record = new (std::nothrow) LongRecord{registration.handle, registration.base_addr,
                                                 registration.key};
    if (record == nullptr) return false;
    handle = record;
    long_record = true;
    return true;
  }
  nic::Registration registration() const {
    nic::Registration registration;
    registration.desc = desc;
    if (long_record) {
      const auto* record = static_cast<const LongRecord*>(handle);
      registration.handle = record->handle;
      registration.base_addr = record->base_addr;
      registration.key = record->key;
      return registration;
    }
    registration.handle = handle;
    registration.base_addr = base_at_start ? start : 0;
    registration.key = KeyBytes::from_u64(key_low, key_size);
    return registration;
  }
  // After deregistration: the LongRecord, if any, goes.  Nothing here is written: threads
  // that dropped their references may still read the entry's bytes (reset() clears them).
  void drop_long_record() const {
    if (long_record) delete static_cast<LongRecord*>(handle);
  }
  // The key's low 64 bits, as KeyBytes::low_u64 gives them.
  uint64_t key_low_u64() const { return key_low; }
  // What threads count in their own tables: the owner's count, and every thread's when the
  // entry is held elsewhere; `holders` gets a bit (id - 1) per thread with a count.  Another
  // thread's count is exact only after heavy_fence().
  uint32_t thread_counts(uint64_t* holders = nullptr) const {
    uint64_t mask = 0;
    uint32_t sum = 0;
    for_each_counting_thread([&](unsigned id) {
      const uint32_t count = OwnerCounts::of(id, this);
      if (count != 0) mask |= uint64_t{1} << (id - 1);
      sum += count;
    });
    if (holders != nullptr) *holders = mask;
    return sum;
  }
  // Calls visit(id) for each thread that may count references to it in its own table: its
  // owner, or every thread with a table when it is held elsewhere.
  template <typename Visit>
  void for_each_counting_thread(Visit&& visit) const {
    if (held_elsewhere.load(std::memory_order_acquire) == 0) {
      if (owner != 0) visit(owner);
      return;
    }
    const unsigned threads = exclusive_slots_assigned();
    for (unsigned id = 1; id <= threads; ++id) visit(id);
  }
  // A moment's count of both kinds, for heuristics (eviction, statistics): threads' parts may
  // be behind by what they have not yet made visible.
  uint32_t references() const {
    return references(state.load(std::memory_order_relaxed), thread_counts());
  }
  // The references `seen` (a value of state) and the threads' counts `owned` add up to.
  static uint32_t references(uint32_t seen, uint32_t owned) {
    return (seen & kRefMask) - kZero + owned;
  }
  // Whether `seen` with the threads' counts `owned` describes an entry out of the index that
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
  // Drops the counts threads still record for it (cache/owner_counts.h, forget): counts left
  // offset by a debt, which the next entry at this address must not inherit.  Once nobody
  // can touch the entry (a grace period after it was finalized, or the pool's end).
  void forget_thread_counts() {
    for_each_counting_thread([&](unsigned id) { OwnerCounts::forget(id, this); });
  }
  // Back to a fresh, claimed entry with one shared reference, its allocator's.  Only after a
  // grace period since it was finalized (cache/entry_pool.h): no reader still holds it.
  void reset() {
    state.store(kClaimed | (kZero + 1), std::memory_order_relaxed);
    forget_thread_counts();
    owner = 0;
    level = 0;
    subscribed = false;
    collected = false;
    base_at_start = false;
    long_record = false;
    held_elsewhere.store(0, std::memory_order_relaxed);
    key_size = 0;
    start = 0;
    length = 0;
    key = CacheKey{};
    desc = nullptr;
    key_low = 0;
    handle = nullptr;
    next = nullptr;
  }
};
static_assert(sizeof(CacheEntry) == 72, "every byte of an entry costs a megabyte at 1M regions");
static_assert(KeyBytes::kMaxSize < 32, "key_size has 5 bits");
static_assert(kThreadSlots < 128, "owner has 7 bits");

}  // namespace hmr::core
