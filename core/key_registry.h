// Keys a domain hands out or accepts: requested keys in use (unique per domain) and the
// 64-bit keys map_raw created for peers' raw keys.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "nic/key_bytes.h"
#include "util/status.h"

namespace hmr::core {

class RequestedKeys {
 public:
  // HMR_ENOKEY when an open MR of the domain already uses `key`.
  Status reserve(uint64_t key);
  void release(uint64_t key);

 private:
  std::mutex mutex_;
  std::unordered_set<uint64_t> in_use_;
};

class MappedRawKeys {
 public:
  uint64_t map(const KeyBytes& raw_key);
  Status unmap(uint64_t key);
  std::optional<KeyBytes> find(uint64_t key) const;

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, KeyBytes> mapped_;
  uint64_t next_key_ = 1;
};

}  // namespace hmr::core
