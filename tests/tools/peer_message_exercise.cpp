#include "peer_message_exercise.h"

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include <rdma/fabric.h>

#include "peer_address.h"
#include "peer_message.h"

namespace hmr::perftest::test {
namespace {

// An accepted body must be exactly what encoding the decoded message writes after its
// header: a decoder that accepted bytes it would not write has read them some other way
// than the sender meant (a field skipped, a length trusted, trailing bytes ignored).
template <typename Message>
std::string check(std::span<const uint8_t> body, std::optional<Message> decoded,
                  const std::string& why, const char* what) {
  if (!decoded) return why.empty() ? std::string(what) + " rejected without a reason" : "";
  const std::vector<uint8_t> again = encode(*decoded);
  if (again.size() < kPeerHeaderSize ||
      !std::equal(again.begin() + kPeerHeaderSize, again.end(), body.begin(), body.end())) {
    return std::string("an accepted ") + what + " does not re-encode to its bytes";
  }
  return {};
}

// A peer's fabric address, which fi_av_insert will read with no length (peer_address.h): the
// first byte picks the provider's format, a string one (shm's) or a 16-byte sockaddr_in
// (tcp's).  An accepted string must end within the bytes received, at its only NUL.
std::string check_address(std::span<const uint8_t> input) {
  if (input.empty()) return {};
  const bool string_format = input[0] % 2 == 0;
  const std::vector<uint8_t> own(string_format ? 18 : 16, 0x41);
  const std::span<const uint8_t> theirs = input.subspan(1);
  std::string why;
  const bool accepted = acceptable_peer_address(string_format ? FI_ADDR_STR : FI_SOCKADDR_IN,
                                                own, theirs, &why);
  if (!accepted) return why.empty() ? "an address rejected without a reason" : "";
  if (!string_format) {
    return theirs.size() == own.size() ? "" : "an accepted sockaddr is not the provider's size";
  }
  if (theirs.size() > kMaxStringAddress) return "an accepted string address is over its bound";
  const auto nul = std::find(theirs.begin(), theirs.end(), uint8_t{0});
  if (nul == theirs.end() || nul + 1 != theirs.end() || nul == theirs.begin()) {
    return "an accepted string address is not one non-empty string ended by the last byte";
  }
  return {};
}

}  // namespace

std::string exercise_peer_decoders(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  const std::span<const uint8_t> input(data + 1, size - 1);
  std::string why;
  switch (data[0] % 7) {
    case 0: {
      if (input.size() < kPeerHeaderSize) return {};
      size_t body_size = 0;
      const std::optional<MessageType> type =
          decode_header(input.first(kPeerHeaderSize), &body_size, &why);
      if (!type) return why.empty() ? "a header rejected without a reason" : "";
      // What the reader then allocates and waits for is bounded by the protocol's limit.
      if (body_size > kMaxBodySize) return "an accepted header announces more than kMaxBodySize";
      return {};
    }
    case 1: return check(input, decode_hello(input, &why), why, "hello");
    case 2: {
      std::optional<BufferInfo> buffer = decode_buffer(input, &why);
      if (buffer && (buffer->key.size() > kMaxKeySize ||
                     buffer->fabric_address.size() > kMaxFabricAddress)) {
        return "an accepted buffer message holds a key or address over its bound";
      }
      return check(input, std::move(buffer), why, "buffer message");
    }
    case 3: return check(input, decode_done(input, &why), why, "done message");
    case 4: return check(input, decode_progress(input, &why), why, "progress message");
    case 6: return check_address(input);
    default: {
      std::optional<PeerError> error = decode_error(input, &why);
      if (error) {
        if (error->reason.size() > kMaxReasonSize) return "an accepted error is over its bound";
        for (const char c : error->reason) {
          if (c < 0x20 || c > 0x7e) return "an accepted error holds a byte that is not printable";
        }
      }
      return check(input, std::move(error), why, "error message");
    }
  }
}

}  // namespace hmr::perftest::test
