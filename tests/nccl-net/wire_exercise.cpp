#include "wire_exercise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <vector>

#include "wire/control_message.h"
#include "wire/eager_data.h"
#include "wire/listen_handle.h"
#include "wire/write_completion.h"

namespace hmr::nccl::test {

std::string exercise_wire_parsers(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);

  // A control message of any length: one decode accepts names a port (the shared endpoint's
  // router reads only that), and re-encodes to its bytes with it.
  std::string why;
  const std::optional<uint64_t> port = control_message_port(bytes);
  if (auto message = decode_control_message(bytes, &why)) {
    if (!port) return "an accepted control message names no port";
    const std::vector<uint8_t> again = encode(*message, *port);
    if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) {
      return "an accepted control message does not re-encode to its bytes";
    }
  } else if (why.empty()) {
    return "a control message was rejected without a reason";
  }

  // A listen handle: NCCL always hands over 128 bytes; shorter input is a truncated one.
  std::array<uint8_t, kHandleSize> handle{};
  if (size > 0) std::memcpy(handle.data(), data, std::min(size, kHandleSize));
  why.clear();
  if (auto decoded = decode_listen_handle(handle, &why)) {
    std::array<uint8_t, kHandleSize> again{};
    std::string encode_why;
    if (!encode(*decoded, again, &encode_why)) return "an accepted handle cannot be encoded: " + encode_why;
    // The connect state's id belongs to the connecting side (outside the checksum); all the
    // rest must come back byte for byte.
    std::array<uint8_t, kHandleSize> expected = handle;
    write_connect_state(expected, 0);
    if (again != expected) return "an accepted handle does not re-encode to its bytes";
  } else if (why.empty()) {
    return "a handle was rejected without a reason";
  }

  // Remote CQ data: any 32 bits split into fields that encode back to the same bits, and any
  // run of them taken as parts of one buffer's message never claims more than the largest
  // message, never completes twice, and takes nothing once refused or complete.
  for (size_t at = 0; at + 4 <= size && at < 64; at += 4) {
    uint32_t cq_data = 0;
    std::memcpy(&cq_data, data + at, 4);
    if (encode(decode_write_completion(cq_data)) != cq_data) {
      return "remote CQ data does not survive decode and encode";
    }
  }
  LandedParts landed;
  for (size_t at = 0; at + 4 <= size && at < 64; at += 4) {
    uint32_t cq_data = 0;
    std::memcpy(&cq_data, data + at, 4);
    const bool was_complete = landed.complete;
    // A refusal fails the comm: nothing after it counts.
    if (take_part(landed, decode_write_completion(cq_data)) != nullptr) break;
    if (was_complete) return "a part was taken after its message was complete";
    if (landed.bytes > kMaxMessageSize) return "parts add up to more than the largest message";
  }

  // An eager message's CQ data: any 32 bits name a tag the sender may use eagerly and an
  // ordinal that encodes back to them, whatever the receiver's count.
  if (size >= 4) {
    uint32_t cq_data = 0;
    std::memcpy(&cq_data, data, 4);
    EagerAddress a = decode_eager_address(cq_data);
    if (!eager_tag(a.tag)) return "an eager message's CQ data names a tag no sender sends eagerly";
    uint32_t next = 0;
    if (size >= 8) std::memcpy(&next, data + 4, 4);
    a.ordinal = restore_ordinal(a.ordinal, next);
    if (encode(a) != cq_data) return "an eager message's CQ data does not survive decode and encode";
    if (a.ordinal - (next - kEagerOrdinalsBehind) >= (1u << kEagerOrdinalBits)) {
      return "a restored ordinal lies outside its window";
    }
  }
  return {};
}

}  // namespace hmr::nccl::test
