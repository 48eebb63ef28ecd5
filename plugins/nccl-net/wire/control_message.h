// The messages a send comm and a recv comm exchange over the fabric, besides the data itself:
//
//   header:               "HMRC" | u16 version | u16 type | u64 port  (the body is the rest)
//   connect_request:      u64 nonce | str address | u64 port | u32 pid | u64 process space |
//                         u32 eager max | u32 eager credits     connector -> listener
//   connect_accept:       (the same fields)                     new recv comm -> connector
//   receive_announcement: u8 slot | u8 generation | u8 count | count x
//                         (u64 address | u64 size | u64 key | u32 tag | u32 ordinal)
//                                                           receiver -> sender
//   send_failure:         u8 slot | u8 generation | u8 index | u32 reason | u64 size
//                                                           sender -> receiver
//   eager_credit:         u8 count | count x (u32 tag | u32 consumed)   receiver -> sender
//   eager_failure:        u32 tag | u32 ordinal | u32 reason | u64 size sender -> receiver
//   connect_ready:        u64 nonce                                 connector -> new recv comm
//   connect_refused:      u64 nonce | str reason                    listener -> connector
//   send_closed:          u64 delivered                             sender -> receiver
//
// A receive announcement is what NCCL's IB transport calls a clear-to-send: per posted buffer,
// where it is (the address RMA uses), how large, its hmr key, the tag a send must carry, and
// its ordinal: the buffer's place among the comm's posted buffers of that tag (0, 1, 2, ...).
// The k-th isend of tag t fills the buffer (t, k), whatever order the fabric delivers
// announcements in (EFA's SRD reorders messages unless asked not to) and whatever order the
// senders of a grouped receive come in.  Messages of up to the eager max move without an
// announcement (fi_senddata into the receiver's bounce buffers, the CQ data naming (t, k):
// net/eager.h); eager credits say how many of those one tag may have unconsumed, and an
// eager_credit message returns them.  The connect request carries the connector's eager max,
// the accept the one both use (the smaller; 0: none) and the credits per tag.
// The pid and the process space (which host boot and pid namespace the pid belongs to) let a
// peer on the same host notice that the other process exited although no operation of its
// own fails (net/peer_watch.h); version 2 had neither.  Version 5 changed the remote CQ
// data to 4 bytes (wire/write_completion.h, wire/eager_data.h), so a version-4 peer is refused.
// The header's port says which comm of the receiving endpoint the message is for: send comms
// share one endpoint per device (net/shared_endpoint.h), whose receive buffers take the
// messages of all of them.  A connect request names the connector's port (where the accept and
// every later message to it go), an accept the new recv comm's (0 while each recv comm has an
// endpoint of its own); a request goes to the listener's port, which its listen handle names
// (wire/listen_handle.h, version 2).  A port is a random 64-bit key, told only to the comm's
// peer (a listener's: to whoever NCCL gives its handle), so a peer can address no comm but
// its own.  Version 6 added the ports.
// Version 7 added connect_ready, the connector's first message to the new recv comm's own
// endpoint: a recv comm sends from the shared endpoint and never from its own, so nothing
// else would set up the provider's connection to that endpoint before the first message (an
// eager one, which must leave while the receiver is not progressing: net/eager.h), and accept
// hands the comm to NCCL once it arrived.
// Version 8 added connect_refused: a listener that cannot make the connection for want of its
// own resources (file descriptors, memory, registrations) says why, through its port on the
// shared endpoint, whose provider connection to the connector already exists (the request
// came over it), so a connector does not wait for an accept that will never come.  The reason is what the
// listener logged, printable ASCII of at most kMaxRefusalReason bytes, for the connector's log.
// Version 9 added send_closed, a send comm's last message (closeSend): how many RMA writes
// and eager messages it posted that completed, each of which arrives at the recv comm with
// remote CQ data.  Once that many arrived, nothing more will, whatever order they came in:
// the receiver knows where the sender's messages end exactly, and need not guess from a
// quiet after its process exited (net/peer_watch.h), which a loaded host may outlast.
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

inline constexpr uint16_t kControlVersion = 9;
// Room for the largest message (an announcement of kMaxRecvs buffers, or an address).
inline constexpr size_t kControlBufferSize = 512;
// The longest reason a refusal carries (longer ones are cut: refusal_reason()).
inline constexpr size_t kMaxRefusalReason = 320;

struct ConnectRequest {
  uint64_t nonce = 0;
  std::vector<uint8_t> address;
  uint64_t port = 0;           // the connector's port on that address
  uint32_t pid = 0;            // the sending process (0: not told)
  uint64_t process_space = 0;  // where that pid means something (0: unknown)
  uint32_t eager_max = 0;      // the largest message the connector would send eagerly
  uint32_t eager_credits = 0;  // (unused in a request)
};
struct ConnectAccept {
  uint64_t nonce = 0;
  std::vector<uint8_t> address;
  uint64_t port = 0;           // the recv comm's port on that address
  uint32_t pid = 0;
  uint64_t process_space = 0;
  uint32_t eager_max = 0;      // the eager max both ends use (0: every message announced)
  uint32_t eager_credits = 0;  // eager messages of one tag the receiver holds unconsumed
};
struct AnnouncedBuffer {
  uint64_t address = 0;  // what the sender's RMA targets: a VA, or an offset in the registration
  uint64_t size = 0;
  uint64_t key = 0;
  int32_t tag = 0;
  uint32_t ordinal = 0;  // this buffer's number among the comm's posted buffers of `tag` (wraps)
};
struct ReceiveAnnouncement {
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

// Eager messages of each tag the receiver has consumed so far (a running count, wrapping).
struct TagCredit {
  int32_t tag = 0;
  uint32_t consumed = 0;
};
struct EagerCredit {
  uint8_t count = 0;
  TagCredit tags[kMaxRecvs];
};
enum class EagerFailureReason : uint32_t {
  send_failed = 1,  // the sender's fi_senddata failed after it was posted
};
struct EagerFailure {
  int32_t tag = 0;
  uint32_t ordinal = 0;
  EagerFailureReason reason = EagerFailureReason::send_failed;
  uint64_t size = 0;
};

// The connector got the accept: its first message to the new recv comm's own endpoint.
struct ConnectReady {
  uint64_t nonce = 0;  // the listener's, as in the request
};

// The listener could not answer a connect request for want of its own resources.
struct ConnectRefused {
  uint64_t nonce = 0;  // the listener's, as in the request
  std::string reason;  // printable ASCII, at most kMaxRefusalReason bytes
};
// The send comm is closing (closeSend) and sent all it will: `delivered` RMA writes and eager
// messages, each completed on its side.  Sent only when none is still in flight.
struct SendClosed {
  uint64_t delivered = 0;
};

// `text` made fit for a refusal: bytes that are not printable ASCII become '?', and it is cut
// to kMaxRefusalReason bytes.
std::string refusal_reason(const std::string& text);

using ControlMessage = std::variant<ConnectRequest, ConnectAccept, ReceiveAnnouncement, SendFailure,
                                    EagerCredit, EagerFailure, ConnectReady, ConnectRefused,
                                    SendClosed>;

// `port`: the receiving comm's port on its endpoint (the header's).
std::vector<uint8_t> encode(const ControlMessage& message, uint64_t port = 0);
// The same bytes written into `out` (a registered send buffer, with no allocation); their
// length, or 0 when they do not fit.
size_t encode_into(const ControlMessage& message, uint64_t port, std::span<uint8_t> out);
std::optional<ControlMessage> decode_control_message(std::span<const uint8_t> bytes,
                                                     std::string* why);
// The port a message is for: its header's, when the header is this version's (magic, version,
// length); nullopt otherwise (the body is not looked at).
std::optional<uint64_t> control_message_port(std::span<const uint8_t> bytes);
const char* describe(SendFailureReason reason);
const char* describe(EagerFailureReason reason);

}  // namespace hmr::nccl
