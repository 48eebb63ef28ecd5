// The 128 bytes NCCL carries from listen() on one rank to connect() on another: how to reach
// the listener, and a nonce so the listener accepts only connections made from this handle.
//
//   0   "HMRN"           4   u16 version       6   u16 address length
//   8   u64 nonce        16  u32 provider tag  20  u32 checksum (bytes 0-19, port, address)
//   24  u64 port         32  address, zero-padded to byte 112
//   112 connect state: 16 bytes that belong to the connecting side (NCCL calls connect() again
//       with the same buffer until it returns a comm, and this is where the plugin finds its
//       connection in progress: a u64 id, then 8 reserved bytes); zero in a handle fresh from
//       listen(), outside the checksum, and checked to be zero when a connect starts.
//
// The address is the listener's device's shared endpoint (net/shared_endpoint.h) and the port
// the listener's on it, where connect requests go (version 2; version 1 named an endpoint of
// the listener's own).
// The handle comes from another process over NCCL's bootstrap: decode() checks every field and
// says what is wrong; nothing of a rejected handle is used.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hmr::nccl {

inline constexpr size_t kHandleSize = 128;
inline constexpr uint16_t kHandleVersion = 2;
inline constexpr size_t kHandlePortOffset = 24;
inline constexpr size_t kHandleAddressOffset = 32;
inline constexpr size_t kConnectStateOffset = 112;
inline constexpr size_t kMaxHandleAddress = kConnectStateOffset - kHandleAddressOffset;  // 80

struct ListenHandle {
  uint64_t nonce = 0;
  uint32_t provider_tag = 0;  // provider_tag() of the listener's provider
  std::vector<uint8_t> address;
  uint64_t port = 0;          // the listener's port on that address (never 0)
};

// A short fingerprint of a provider name, so a handle from a tcp rank is refused by an shm one.
uint32_t provider_tag(const std::string& provider);

// Writes the whole 128 bytes (connect state zeroed); false if the address is too long.
bool encode(const ListenHandle& handle, std::span<uint8_t, kHandleSize> out, std::string* why);
std::optional<ListenHandle> decode_listen_handle(std::span<const uint8_t, kHandleSize> bytes,
                                                 std::string* why);

// The connect state: 0 until the first connect() call stores its connection's id there.
uint64_t read_connect_state(std::span<const uint8_t, kHandleSize> bytes);
void write_connect_state(std::span<uint8_t, kHandleSize> bytes, uint64_t id);

}  // namespace hmr::nccl
