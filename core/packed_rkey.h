// The bytes of a packed remote key (hmr_rkey_pack / hmr_rkey_unpack): what a peer needs to
// reach an MR, laid out so that a reader can check every field before using any.
//
// Version 1, little-endian, 44 + key_size bytes:
//    0  u32  magic "hmrK"            12  u32  NIC identity (FNV-1a of the libfabric provider)
//    4  u8   version (1)             16  u64  device
//    5  u8   header size (40)        24  u64  remote address of the MR's first byte
//    6  u8   NIC kind (1..4)         32  u64  length
//    7  u8   key size (1..16)        40  key bytes
//    8  u16  flags                   40+key_size  u32  FNV-1a of every byte before it
//   10  u16  memory iface
// The header size lets a later version append fields that this one skips; the checksum
// catches corruption in transit (not forgery: a key is a capability by itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "nic/key_bytes.h"
#include "util/status.h"

namespace hmr::core {

// callback: the application's own NIC (nic = "callback"), whose keys only it can read.
enum class NicKind : uint8_t { sim = 1, ofi = 2, verbs = 3, callback = 4 };

// Whose keys these are: the kind of NIC, and for libfabric the provider (a tcp key means
// nothing to shm).  Two verbs devices read each other's keys, so verbs carries no more.
struct NicIdentity {
  NicKind kind = NicKind::sim;
  uint32_t provider = 0;  // FNV-1a of the libfabric provider name; 0 for the others
  bool operator==(const NicIdentity&) const = default;
};

struct PackedRkey {
  static constexpr uint32_t kMagic = 0x4b726d68;  // "hmrK" as bytes
  static constexpr uint8_t kVersion = 1;
  static constexpr size_t kHeaderSize = 40;
  static constexpr size_t kChecksumSize = 4;
  static constexpr size_t kMaxSize = kHeaderSize + KeyBytes::kMaxSize + kChecksumSize;
  static constexpr uint16_t kRawKey = 1u << 0;   // the key is raw bytes (HMR_MR_RAW)
  static constexpr uint16_t kVirtAddr = 1u << 1; // addresses are virtual addresses
  static constexpr uint16_t kKnownFlags = kRawKey | kVirtAddr;

  NicIdentity nic;
  uint16_t flags = 0;
  uint16_t iface = 0;
  uint64_t device = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  KeyBytes key;

  static constexpr size_t size_for(size_t key_size) {
    return kHeaderSize + key_size + kChecksumSize;
  }
  size_t packed_size() const { return size_for(key.size); }
  // Writes packed_size() bytes to `out`.
  void encode(uint8_t* out) const;
  // Reads a peer's bytes; every failure says which field and why.  Checks the blob alone;
  // whether it suits a domain is RemoteKey::unpack's question.
  static Result<PackedRkey> decode(std::span<const uint8_t> bytes);
};

// The identity a NIC's capability name ("sim", "ofi:tcp;ofi_rxm", "verbs:mlx5_0") stands
// for; a NIC of another kind has no packable keys.
Result<NicIdentity> nic_identity_of(std::string_view capability_name);
const char* nic_kind_name(NicKind kind);

}  // namespace hmr::core
