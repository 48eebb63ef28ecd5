// The fixture of the core::RegistrationCache tests: a fake backend (counting NIC
// registrations) and a fake monitor (counting subscriptions; invalidations sent by the test
// through notify()).  The contract is docs/semantics.md, "Registration cache".
#pragma once

#include "cache/registration_cache.h"
#include "util/thread_slot.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace hmr::core {

// Reaches the index slot that files a handle's entry under the block of `start` (tests only,
// no other thread running).
class RegistrationCacheTestPeer {
 public:
  static BlockIndex::Slot* slot_of(RegistrationCache& cache, const CacheHandle& handle,
                                   uintptr_t start) {
    const CacheEntry& entry = *handle.entry;
    return cache.index_.slot_of(&entry, entry.level, BlockIndex::block_at(start, entry.level));
  }
  // Takes back a count `thread_id` took of `entry`, as a hit does when its look turns out
  // stale (RegistrationCache::undo_stale_count), then does what the hit path does after its
  // read section.
  static void take_back_stale_count(RegistrationCache& cache, CacheEntry& entry,
                                    unsigned thread_id) {
    RegistrationCache::Hit hit;
    {
      const ReadSection section(cache.readers_);
      cache.undo_stale_count(entry, thread_id, hit);
    }
    if (hit.orphans != nullptr) cache.finalize_all(hit.orphans);
    if (hit.sweep) cache.sweep_held();
  }
  // Entries on their way out without the application, which release_unused() waits for.
  static uint64_t in_transit(const RegistrationCache& cache) {
    return cache.in_transit_.load(std::memory_order_acquire);
  }
  // wait_for_in_transit()'s bound on rounds without progress (2^20), lowered so that a test
  // sees at once whether a wait ended at it.
  static void set_rounds_without_progress(RegistrationCache& cache, unsigned rounds) {
    cache.rounds_without_progress_ = rounds;
  }
  // Rounds wait_for_in_transit() went through in this cache's life.
  static uint64_t rounds_waited(const RegistrationCache& cache) {
    return cache.rounds_waited_.load(std::memory_order_relaxed);
  }
};

namespace cache_test {

inline constexpr uint64_t kPage = 4096;
inline constexpr uintptr_t kBase = 0x7e0000000000;

inline uintptr_t page(uint64_t n) { return kBase + n * kPage; }

// A stress-test thread's own reproducible stream of draws (Knuth's MMIX LCG), seeded by the
// thread's number; callers use the high bits.
class Draws {
 public:
  explicit Draws(int seed) : state_(0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(seed)) {}
  uint64_t next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return state_;
  }

 private:
  uint64_t state_;
};

class FakeBackend final : public CacheBackend {
 public:
  Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                           const CacheKey& key) override {
    (void)key;
    if (during_register) during_register(start, len);
    if (fail_next) {
      fail_next = false;
      return make_error(HMR_EFAULT, "fake backend refuses [%#lx, +%llu)",
                        static_cast<unsigned long>(start), static_cast<unsigned long long>(len));
    }
    const uint64_t id = registrations.fetch_add(1) + 1;
    nic::Registration registration;
    registration.handle = reinterpret_cast<void*>(id);
    registration.desc = reinterpret_cast<void*>(id);
    registration.key = KeyBytes::from_u64(id, 8);
    registration.base_addr = start;
    if (long_keys) {  // 16 bytes: the id, then its complement
      registration.key.size = 16;
      const uint64_t complement = ~id;
      std::memcpy(registration.key.bytes + 8, &complement, sizeof complement);
    }
    if (odd_base) registration.base_addr = start + 0x1000;  // neither the start nor 0
    std::lock_guard<std::mutex> lock(mutex);
    live.insert(id);
    return registration;
  }
  void deregister(nic::Registration& registration, uintptr_t, uint64_t) noexcept override {
    const auto id = reinterpret_cast<uint64_t>(registration.handle);
    if (during_deregister) during_deregister(id);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(live.erase(id), 1u) << "registration " << id << " deregistered twice or never made";
    deregistered.push_back(id);
    deregistrations.fetch_add(1);
    registration = nic::Registration();
  }
  bool deregistration_may_wait_for_application() const override {
    return dereg_may_wait_for_application;
  }

  static uint64_t id_of(const CacheHandle& handle) {
    return reinterpret_cast<uint64_t>(handle.registration().handle);
  }
  bool is_live(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    return live.count(id) != 0;
  }

  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> deregistrations{0};
  std::mutex mutex;
  std::set<uint64_t> live;
  std::vector<uint64_t> deregistered;
  bool fail_next = false;
  bool long_keys = false;  // 16-byte keys, as some RAW-key providers give
  bool odd_base = false;   // a base_addr that is neither the start nor 0
  // As a callback NIC's: false, as verbs' and libfabric's.
  bool dereg_may_wait_for_application = false;
  std::function<void(uintptr_t, uint64_t)> during_register;
  std::function<void(uint64_t)> during_deregister;  // with the registration's id, before it goes
};

class FakeMonitor final : public Monitor {
 public:
  const char* name() const override { return "fake"; }
  Status start() override {
    starts.fetch_add(1);
    return ok_status();
  }
  void stop() override { stops.fetch_add(1); }
  Status subscribe(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    if (refuse_subscribe) return make_error(HMR_EFAULT, "fake monitor refuses");
    subscribes.fetch_add(1);
    return ok_status();
  }
  void unsubscribe(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    unsubscribes.fetch_add(1);
  }
  bool valid(uintptr_t start, size_t len) override {
    (void)start;
    (void)len;
    valid_calls.fetch_add(1);
    return answer_valid.load();
  }
  bool checks_on_hit() const override { return check_on_hit; }
  // As userfaultfd's event thread between reading an unmap (the unmapping thread goes on) and
  // delivering it (uffd_watcher.cpp).
  void raise_pending() { pending_counter().fetch_add(1, std::memory_order_seq_cst); }
  void lower_pending() { pending_counter().fetch_sub(1, std::memory_order_seq_cst); }

  std::atomic<int> starts{0}, stops{0}, subscribes{0}, unsubscribes{0}, valid_calls{0};
  std::atomic<bool> answer_valid{true};
  bool check_on_hit = false;
  bool refuse_subscribe = false;
};

inline CacheKey access_key(uint32_t access = 1) {
  CacheKey key;
  key.access = access;
  return key;
}

inline CacheLimits limits(size_t count, uint64_t bytes = 0) {
  CacheLimits l;
  l.max_count = count;
  l.max_bytes = bytes;
  return l;
}

class RegistrationCacheTest : public ::testing::Test {
 protected:
  // A fresh cache with these limits, attached to the fake monitor.
  RegistrationCache& make(CacheLimits l, bool with_monitor = true) {
    cache_ = std::make_unique<RegistrationCache>(backend_, l, with_monitor ? &monitor_ : nullptr);
    EXPECT_TRUE(cache_->attach().ok());
    return *cache_;
  }
  CacheHandle get(uintptr_t start, uint64_t len, CacheKey key = access_key()) {
    Result<CacheHandle> handle = cache_->get(start, len, key);
    EXPECT_TRUE(handle.ok()) << (handle.ok() ? "" : handle.status().reason());
    return handle.ok() ? *handle : CacheHandle{};
  }
  // get() and put() at once: leaves an unused cached entry; returns its registration id.
  uint64_t touch(uintptr_t start, uint64_t len, CacheKey key = access_key()) {
    CacheHandle handle = get(start, len, key);
    if (!handle) return 0;
    const uint64_t id = FakeBackend::id_of(handle);
    cache_->put(handle);
    return id;
  }
  // get() of page p on a worker thread: a failure, or a handle whose entry does not cover the
  // page or whose registration is dead, is counted in `wrong`; an empty handle on failure.
  CacheHandle get_checked(uint64_t p, std::atomic<int>& wrong) {
    Result<CacheHandle> handle = cache_->get(page(p), kPage, access_key());
    if (!handle.ok()) {
      wrong.fetch_add(1);
      return {};
    }
    if (!handle->entry->contains(page(p), kPage) ||
        !backend_.is_live(FakeBackend::id_of(*handle))) {
      wrong.fetch_add(1);
    }
    return *handle;
  }
  void TearDown() override {
    cache_.reset();
    // Every NIC registration the cache made is gone once the cache is; every subscription
    // was withdrawn.
    EXPECT_EQ(backend_.registrations.load(), backend_.deregistrations.load());
    EXPECT_TRUE(backend_.live.empty());
    EXPECT_EQ(monitor_.subscribes.load(), monitor_.unsubscribes.load());
  }

  FakeBackend backend_;
  FakeMonitor monitor_;
  std::unique_ptr<RegistrationCache> cache_;
};

}  // namespace cache_test
}  // namespace hmr::core
