// The references a thread holds on cache entries, counted in a small table of the thread's
// own rather than in the entries (cache/cache_entry.h: thread counts and shared references).
// Every thread that owns a ThreadSlot outright has one; "owner" below is that thread (the
// entry's own `owner`, the thread that filed it, is one such thread among others).
//
// Why not in the entry: every byte of an entry costs a megabyte at a million cached regions,
// and a hit that counts its reference without touching the entry's line is what a hit served
// from the index slot alone needs (docs/performance.md, "One miss per hit").  The table is the
// thread's: 64 records of one word each (the entry's address and a count), written by that
// thread with plain stores, read by any thread, which must first run heavy_fence() to see its
// latest stores (util/asymmetric_fence.h).
//
// A record is found at one of two neighbouring positions chosen by the entry's address, so a
// look costs one line of the owner's own table.  A record whose count is 0 is free: another
// entry of the owner may take it, which the readers of the first see as a count of 0, the
// truth.  When both positions hold other entries' references (or the count is at kMaxCount),
// add() says no and the caller takes a shared reference instead, counted in the entry's state.
#pragma once

#include <atomic>
#include <cstdint>

#include "util/thread_slot.h"

namespace hmr::core {

struct CacheEntry;

class OwnerCounts {
 public:
  static constexpr unsigned kRecords = 64;
  static constexpr uint32_t kMaxCount = 0xffff;

  // The references owner `owner_id` (1..kThreadSlots) holds on `entry`; 0 for owner 0 (none).
  // Any thread; another thread's answer is exact only after heavy_fence().
  static uint32_t of(unsigned owner_id, const CacheEntry* entry) {
    if (owner_id == 0) return 0;
    uint64_t word = 0;
    return record_of(owner_id, entry, word, std::memory_order_acquire) != nullptr
               ? count_in(word)
               : 0;
  }

  // The owner adds one to its count of `entry` (its own thread only, owner_id != 0), with
  // the count before in `before`; false, with nothing changed, where set() would refuse or
  // the count is at `limit` already.  One look at the pair, for the hit path.
  static bool add(unsigned owner_id, const CacheEntry* entry, uint32_t& before,
                  uint32_t limit = kMaxCount) {
    uint64_t word = 0;
    std::atomic<uint64_t>* record = record_of(owner_id, entry, word, std::memory_order_relaxed);
    before = record != nullptr ? count_in(word) : 0;
    if (record == nullptr) record = free_record(owner_id, entry);
    if (record == nullptr || before >= limit || before == kMaxCount) return false;
    record->store(tag(entry) | (before + 1), std::memory_order_release);
    return true;
  }

  // The owner takes one off its count of `entry` (its own thread only); false, with nothing
  // changed, when it counts none (the caller gives the reference back in the entry's state:
  // another thread's repayment may have moved the owner's count there).  One look at the
  // pair, for the close.
  static bool remove(unsigned owner_id, const CacheEntry* entry) {
    uint64_t word = 0;
    std::atomic<uint64_t>* record = record_of(owner_id, entry, word, std::memory_order_relaxed);
    if (record == nullptr || count_in(word) == 0) return false;
    record->store(word - 1, std::memory_order_release);
    return true;
  }

  // Drops whatever count owner `owner_id` still records for `entry`, from any thread, once
  // nobody can touch the entry (a grace period after it was finalized, or the pool's end).
  // An entry may be finalized with a count left here: references counted here and closed by
  // other threads are given back in its state, which the count then offsets (cache_entry.h),
  // and a later entry at the same address must not inherit it.  The owner never writes that
  // word meanwhile (it neither holds the entry nor sees the record free), so a
  // compare-exchange cannot lose one of its stores.
  static void forget(unsigned owner_id, const CacheEntry* entry) {
    if (owner_id == 0) return;
    uint64_t word = 0;
    std::atomic<uint64_t>* record = record_of(owner_id, entry, word, std::memory_order_relaxed);
    if (record != nullptr && count_in(word) != 0) {
      (void)record->compare_exchange_strong(word, tag(entry), std::memory_order_relaxed);
    }
  }

  // The owner sets its count of `entry` to `count` (its own thread only, owner_id != 0).
  // False, with nothing changed, when `count` is above 0 and neither position is free or
  // holds the entry, or above kMaxCount.  Setting 0 always succeeds.
  static bool set(unsigned owner_id, const CacheEntry* entry, uint32_t count) {
    if (count > kMaxCount) return false;
    uint64_t word = 0;
    std::atomic<uint64_t>* record = record_of(owner_id, entry, word, std::memory_order_relaxed);
    if (record == nullptr) {
      if (count == 0) return true;  // not held: 0 already
      record = free_record(owner_id, entry);
      if (record == nullptr) return false;
    }
    record->store(tag(entry) | count, std::memory_order_release);
    return true;
  }

 private:
  static constexpr unsigned kCountBits = 16;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;

  // The entry's address in the word's top 48 bits (entries live below 2^48: BlockIndex).
  static uint64_t tag(const CacheEntry* entry) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(entry)) << kCountBits;
  }
  static uint32_t count_in(uint64_t word) { return static_cast<uint32_t>(word & kCountMask); }
  // The record of `entry` in its pair, with its word; nullptr when neither holds it.  An entry
  // has one record at most: a record is only ever taken after both were looked at.
  static std::atomic<uint64_t>* record_of(unsigned owner_id, const CacheEntry* entry,
                                          uint64_t& word, std::memory_order order) {
    std::atomic<uint64_t>* pair = pair_of(owner_id, entry);
    for (unsigned i = 0; i < 2; ++i) {
      word = pair[i].load(order);
      if ((word & ~kCountMask) == tag(entry)) return &pair[i];
    }
    return nullptr;
  }
  // A record of the pair whose count is 0 (another entry's, or none), or nullptr.
  static std::atomic<uint64_t>* free_record(unsigned owner_id, const CacheEntry* entry) {
    std::atomic<uint64_t>* pair = pair_of(owner_id, entry);
    for (unsigned i = 0; i < 2; ++i) {
      if (count_in(pair[i].load(std::memory_order_relaxed)) == 0) return &pair[i];
    }
    return nullptr;
  }
  static std::atomic<uint64_t>* pair_of(unsigned owner_id, const CacheEntry* entry) {
    // Entries are 8-byte aligned and 72 bytes apart in their slabs: a multiplicative hash of
    // the address spreads neighbours over the table.
    const uint64_t hash = (reinterpret_cast<uintptr_t>(entry) >> 3) * 0x9E3779B97F4A7C15ULL;
    const unsigned first = static_cast<unsigned>(hash >> 59) * 2;  // 32 pairs
    return &tables[owner_id - 1].records[first];
  }

  struct alignas(64) Table {
    std::atomic<uint64_t> records[kRecords];
  };
  static Table tables[kThreadSlots];
};

}  // namespace hmr::core
