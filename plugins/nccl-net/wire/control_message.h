// The messages a send comm and a recv comm exchange over the fabric, besides the data itself:
//
//   header:               "HMRC" | u16 version | u16 type            (the body is the rest)
//   connect_request:      u64 nonce | str address | u32 pid | u64 process space
//                                                           connector -> listener
//   connect_accept:       u64 nonce | str address | u32 pid | u64 process space
//                                                           new recv comm -> connector
//   receive_announcement: u32 sequence | u8 slot | u8 generation | u8 count | count x
//                         (u64 address | u64 size | u64 key | u32 tag)   receiver -> sender
//   send_failure:         u8 slot | u8 generation | u8 index | u32 reason | u64 size
//                                                           sender -> receiver
//
// A receive announcement is what NCCL's IB transport calls a clear-to-send: per posted buffer,
// where it is (the address RMA uses), how large, its hmr key, and the tag a send must carry.
// Its sequence number is the receive's place among the comm's irecvs (0, 1, 2, ...): the
// sender fills receives in that order whatever order the fabric delivers announcements in
// (EFA's SRD reorders messages unless asked not to; version 1 had no number).
// The pid and the process space (which host boot and pid namespace the pid belongs to) let a
// peer on the same host notice that the other process exited although no operation of its
// own fails (net/peer_watch.h); version 2 had neither.
// The peer is another process: decode() checks the magic, version, type, exact length and the
// bounds of every field, and rejects the message as a whole with a reason.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "limits.h"

namespace hmr::nccl {

inline constexpr uint16_t kControlVersion = 3;
// Room for the largest message (an announcement of kMaxRecvs buffers, or an address).
inline constexpr size_t kControlBufferSize = 512;

struct ConnectRequest {
  uint64_t nonce = 0;
  std::vector<uint8_t> address;
  uint32_t pid = 0;            // the sending process (0: not told)
  uint64_t process_space = 0;  // where that pid means something (0: unknown)
};
struct ConnectAccept {
  uint64_t nonce = 0;
  std::vector<uint8_t> address;
  uint32_t pid = 0;
  uint64_t process_space = 0;
};
struct AnnouncedBuffer {
  uint64_t address = 0;  // what the sender's RMA targets: a VA, or an offset in the registration
  uint64_t size = 0;
  uint64_t key = 0;
  int32_t tag = 0;
};
struct ReceiveAnnouncement {
  uint32_t sequence = 0;  // this receive's number among the comm's irecvs, from 0 (wraps)
  uint8_t slot = 0;
  uint8_t generation = 0;
  uint8_t count = 0;
  AnnouncedBuffer buffers[kMaxRecvs];
};
enum class SendFailureReason : uint32_t {
  too_large = 1,     // the message is larger than the announced buffer
  write_failed = 2,  // the RMA write into the announced buffer failed (e.g. key rejected)
};
struct SendFailure {
  uint8_t slot = 0;
  uint8_t generation = 0;
  uint8_t index = 0;
  SendFailureReason reason = SendFailureReason::too_large;
  uint64_t size = 0;
};

using ControlMessage = std::variant<ConnectRequest, ConnectAccept, ReceiveAnnouncement, SendFailure>;

std::vector<uint8_t> encode(const ControlMessage& message);
// The same bytes written into `out` (a registered send buffer, with no allocation); their
// length, or 0 when they do not fit.
size_t encode_into(const ControlMessage& message, std::span<uint8_t> out);
std::optional<ControlMessage> decode_control_message(std::span<const uint8_t> bytes,
                                                     std::string* why);
const char* describe(SendFailureReason reason);

}  // namespace hmr::nccl
