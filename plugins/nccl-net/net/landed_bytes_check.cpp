#include "net/landed_bytes_check.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace hmr::nccl {

uint64_t message_checksum(const void* data, size_t len) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = 0xcbf29ce484222325ULL ^ len;
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * kPrime;
    h ^= h >> 29;  // (FNV's multiply moves bits up only: fold the high ones back down)
  }
  for (; i < len; ++i) h = (h ^ bytes[i]) * kPrime;
  return h;
}

std::string message_checksum_line(const char* side, uint64_t nonce, int32_t tag,
                                  uint32_t ordinal, size_t len, uint64_t sum) {
  char line[200];
  std::snprintf(line, sizeof line,
                "HMR_NCCL_CHECK_SUM %s nonce=%016" PRIx64 " tag=%d ordinal=%u bytes=%zu "
                "sum=%016" PRIx64,
                side, nonce, tag, ordinal, len, sum);
  return line;
}

void LandedBytesCheck::received(const void* data, size_t len) {
  if (len == 0) return;
  // The same buffer's copy, else a dropped one (its vector reused), else a new one, else the
  // oldest.
  auto same = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.data == data; });
  if (same == kept_.end()) {
    same = std::find_if(kept_.begin(), kept_.end(), [](const Kept& k) { return k.data == nullptr; });
  }
  if (same == kept_.end() && kept_.size() < kKept) same = kept_.emplace(kept_.end());
  if (same == kept_.end()) {
    same = std::min_element(kept_.begin(), kept_.end(),
                            [](const Kept& a, const Kept& b) { return a.order < b.order; });
  }
  same->data = data;
  const auto* bytes = static_cast<const uint8_t*>(data);
  same->bytes.assign(bytes, bytes + len);  // (reuses the vector's memory when it can)
  same->order = next_order_++;
}

std::optional<std::string> LandedBytesCheck::posting_again(const void* data, size_t len) {
  // Every kept receive the new one covers (the same buffer, or one it overlaps: its bytes may
  // be written from now on, legitimately) is compared now and dropped.
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = start + std::max<size_t>(len, 1);
  std::optional<std::string> changed;
  for (Kept& k : kept_) {
    if (k.data == nullptr) continue;
    const auto at = reinterpret_cast<uintptr_t>(k.data);
    if (k.data != data && !(at < end && start < at + k.bytes.size())) continue;
    const auto* now = static_cast<const uint8_t*>(k.data);
    if (!changed && std::memcmp(now, k.bytes.data(), k.bytes.size()) != 0) {
      size_t count = 0;
      size_t first = k.bytes.size();
      size_t last = 0;
      for (size_t i = 0; i < k.bytes.size(); ++i) {
        if (now[i] == k.bytes[i]) continue;
        ++count;
        first = std::min(first, i);
        last = i;
      }
      char where[64];
      std::snprintf(where, sizeof where, "the receive into %p", k.data);
      changed = std::string(where) + " was reported done, and then " + std::to_string(count) +
                " of its " + std::to_string(k.bytes.size()) + " received bytes changed (offsets " +
                std::to_string(first) + " to " + std::to_string(last) + ")";
    }
    k.data = nullptr;  // dropped, its vector kept for the next copy (no allocation once warm)
  }
  return changed;
}

}  // namespace hmr::nccl
