// What hmr-perftest's two processes tell each other over the out-of-band TCP socket, and the
// wire format that carries it.
//
// The peer is another process, possibly on another host, possibly not hmr-perftest at all:
// everything read from it is checked before use (magic, version, type, exact lengths, bounds
// on every field, no trailing bytes) and a message that fails any check is rejected with a
// reason, never partially used.  Integers are little-endian; byte strings are length-prefixed.
//
//   header: "HMRP" | u16 version | u16 type | u32 body length
//   hello (client -> server): u16 test | u16 flags | u64 min_size | u64 max_size |
//                             u64 iterations | str provider | str memory
//   buffer (both ways):       u64 address | u64 length | u64 mr_mode | u8 key_is_raw |
//                             str key | str fabric_address
//   done (both ways):         u64 value (a checksum of what the sender saw, or 0)
//   error (either way):       str reason (printable ASCII), sent instead of the message due
//                             when the sender gives up, just before it closes the connection
//   progress (client -> server, during the bandwidth tests): u64 sequence (1, 2, ...);
//                             the server hears nothing else while the client measures, so
//                             this is how it tells a slow run from a client that stalled
//
// Version 2 added the error message, version 3 the progress message; a peer of another
// version is refused by the header check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hmr::perftest {

inline constexpr uint16_t kPeerMessageVersion = 3;
inline constexpr size_t kPeerHeaderSize = 12;
// Bounds on what a peer may send; generous for real providers, small enough that a hostile
// peer cannot make us allocate much.
inline constexpr size_t kMaxBodySize = 4096;
inline constexpr size_t kMaxProviderName = 64;
inline constexpr size_t kMaxMemoryName = 32;
inline constexpr size_t kMaxKeySize = 256;
inline constexpr size_t kMaxFabricAddress = 1024;
inline constexpr size_t kMaxReasonSize = 1024;
inline constexpr uint64_t kMaxMessageSize = uint64_t{1} << 32;  // 4 GiB
inline constexpr uint64_t kMaxIterations = uint64_t{1} << 32;

enum class MessageType : uint16_t { hello = 1, buffer = 2, done = 3, error = 4, progress = 5 };
enum class TestKind : uint16_t { write_bw = 1, read_bw = 2, write_lat = 3 };

const char* test_name(TestKind test);

// The client's plan, so the server can allocate and register a large enough buffer.
struct Hello {
  TestKind test = TestKind::write_bw;
  uint16_t flags = 0;
  uint64_t min_size = 0;
  uint64_t max_size = 0;
  uint64_t iterations = 0;
  std::string provider;  // both sides must use the same libfabric provider
  std::string memory;    // what the client registers ("host", "cuda:0", ...), for the report
};

// A registered buffer and how to reach it: what the initiator needs for fi_write/fi_read.
struct BufferInfo {
  uint64_t address = 0;  // the address RMA uses for byte 0 (a VA, or 0 for offset-based MRs)
  uint64_t length = 0;
  uint64_t mr_mode = 0;  // the mr_mode the sender's domain runs with
  bool key_is_raw = false;
  std::vector<uint8_t> key;             // the u64 key's 8 bytes, or the raw key
  std::vector<uint8_t> fabric_address;  // fi_getname of the sender's endpoint
};

struct Done {
  uint64_t value = 0;
};

// The client still moves bytes: sent every 250 ms while it does (peer_watch.h).
struct Progress {
  uint64_t sequence = 0;
};

// Why the sender stopped: what its user would have read on its own terminal.
struct PeerError {
  std::string reason;
};

std::vector<uint8_t> encode(const Hello& hello);
std::vector<uint8_t> encode(const BufferInfo& buffer);
std::vector<uint8_t> encode(const Done& done);
std::vector<uint8_t> encode(const Progress& progress);
// Bytes that are not printable ASCII become '?', and a reason over kMaxReasonSize is cut.
std::vector<uint8_t> encode(const PeerError& error);

// Parses a header; on success `body_size` is the body length that must follow.
std::optional<MessageType> decode_header(std::span<const uint8_t> header, size_t* body_size,
                                         std::string* why);

// Each decodes one complete body, or explains in `why` what was wrong with it.
std::optional<Hello> decode_hello(std::span<const uint8_t> body, std::string* why);
std::optional<BufferInfo> decode_buffer(std::span<const uint8_t> body, std::string* why);
std::optional<Done> decode_done(std::span<const uint8_t> body, std::string* why);
std::optional<Progress> decode_progress(std::span<const uint8_t> body, std::string* why);
std::optional<PeerError> decode_error(std::span<const uint8_t> body, std::string* why);

}  // namespace hmr::perftest
