#include "peer_address.h"

#include <rdma/fabric.h>

#include <algorithm>

namespace hmr::perftest {
namespace {

bool refuse(std::string* why, std::string reason) {
  if (why != nullptr) *why = "the peer's fabric address " + std::move(reason);
  return false;
}

}  // namespace

bool acceptable_peer_address(uint32_t format, std::span<const uint8_t> own,
                             std::span<const uint8_t> theirs, std::string* why) {
  if (format != FI_ADDR_STR) {
    if (theirs.size() != own.size()) {
      return refuse(why, "is " + std::to_string(theirs.size()) + " bytes; this provider's are " +
                             std::to_string(own.size()));
    }
    return true;
  }
  if (theirs.empty() || theirs.back() != 0) {
    return refuse(why, "is not a string ended by its NUL (this provider's addresses are strings)");
  }
  if (theirs.size() > kMaxStringAddress) {
    return refuse(why, "is " + std::to_string(theirs.size()) + " bytes, over the " +
                           std::to_string(kMaxStringAddress) + " a string address may have");
  }
  const std::span<const uint8_t> text = theirs.first(theirs.size() - 1);
  if (text.empty()) return refuse(why, "is an empty string");
  const bool printable = std::all_of(text.begin(), text.end(),
                                     [](uint8_t byte) { return byte >= 0x21 && byte <= 0x7e; });
  if (!printable) {
    return refuse(why, "holds a byte that is not printable ASCII (or a NUL before its end)");
  }
  return true;
}

}  // namespace hmr::perftest
