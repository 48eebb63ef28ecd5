#include "net/landed_bytes_check.h"

#include <algorithm>
#include <cstring>

namespace hmr::nccl {

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
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.data == data; });
  if (it == kept_.end()) return std::nullopt;
  const auto* now = static_cast<const uint8_t*>(data);
  const size_t compared = std::min(len, it->bytes.size());
  std::optional<std::string> changed;
  if (std::memcmp(now, it->bytes.data(), compared) != 0) {
    size_t count = 0;
    size_t first = compared;
    size_t last = 0;
    for (size_t i = 0; i < compared; ++i) {
      if (now[i] == it->bytes[i]) continue;
      ++count;
      first = std::min(first, i);
      last = i;
    }
    changed = std::to_string(count) + " of its " + std::to_string(it->bytes.size()) +
              " received bytes changed (offsets " + std::to_string(first) + " to " +
              std::to_string(last) + ")";
  }
  // Dropped, its vector kept for the next copy (no allocation per receive once warm).
  it->data = nullptr;
  return changed;
}

}  // namespace hmr::nccl
