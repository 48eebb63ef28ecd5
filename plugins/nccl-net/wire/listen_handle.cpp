#include "listen_handle.h"

#include <algorithm>
#include <cstring>

#include "byte_codec.h"
#include "fnv1a.h"

namespace hmr::nccl {
namespace {

constexpr uint8_t kMagic[4] = {'H', 'M', 'R', 'N'};
constexpr size_t kChecksumOffset = 20;

// Over the header's first 20 bytes, then the port and the address (bytes 24 on).
uint32_t checksum(std::span<const uint8_t> header, std::span<const uint8_t> port_and_address) {
  return fnv1a(port_and_address, fnv1a(header.first(kChecksumOffset)));
}

}  // namespace

uint32_t provider_tag(const std::string& provider) {
  return fnv1a(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(provider.data()),
                                        provider.size()));
}

bool encode(const ListenHandle& handle, std::span<uint8_t, kHandleSize> out, std::string* why) {
  if (handle.address.empty() || handle.address.size() > kMaxHandleAddress) {
    if (why != nullptr) {
      *why = "the listener's fabric address is " + std::to_string(handle.address.size()) +
             " bytes; a handle holds 1 to " + std::to_string(kMaxHandleAddress);
    }
    return false;
  }
  if (handle.port == 0) {
    if (why != nullptr) *why = "the listener's port is 0";
    return false;
  }
  wire::ByteWriter w;
  w.raw(kMagic);
  w.u16(kHandleVersion);
  w.u16(static_cast<uint16_t>(handle.address.size()));
  w.u64(handle.nonce);
  w.u32(handle.provider_tag);
  std::vector<uint8_t> bytes = w.take();
  std::fill(out.begin(), out.end(), uint8_t{0});
  std::copy(bytes.begin(), bytes.end(), out.begin());
  for (int i = 0; i < 8; ++i) out[kHandlePortOffset + i] = static_cast<uint8_t>(handle.port >> (8 * i));
  std::copy(handle.address.begin(), handle.address.end(), out.begin() + kHandleAddressOffset);
  const uint32_t sum = checksum(
      bytes, std::span<const uint8_t>(out).subspan(kHandlePortOffset, 8 + handle.address.size()));
  for (int i = 0; i < 4; ++i) out[kChecksumOffset + i] = static_cast<uint8_t>(sum >> (8 * i));
  return true;
}

std::optional<ListenHandle> decode_listen_handle(std::span<const uint8_t, kHandleSize> bytes,
                                                 std::string* why) {
  auto reject = [why](const std::string& reason) -> std::optional<ListenHandle> {
    if (why != nullptr) *why = "listen handle rejected: " + reason;
    return std::nullopt;
  };
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return reject("bad magic (not a handle from this plugin's listen())");
  }
  wire::ByteReader r(std::span<const uint8_t>(bytes).subspan(sizeof kMagic, kHandleAddressOffset - sizeof kMagic));
  static_assert(kHandlePortOffset == kChecksumOffset + 4, "the port follows the checksum");
  const uint16_t version = r.u16("version");
  const uint16_t address_size = r.u16("address length");
  ListenHandle handle;
  handle.nonce = r.u64("nonce");
  handle.provider_tag = r.u32("provider tag");
  const uint32_t sum = r.u32("checksum");
  handle.port = r.u64("port");
  std::string reason;
  if (!r.finish(&reason)) return reject(reason);
  if (version != kHandleVersion) {
    return reject("version " + std::to_string(version) + ", this plugin speaks " +
                  std::to_string(kHandleVersion));
  }
  if (address_size == 0 || address_size > kMaxHandleAddress) {
    return reject("address length " + std::to_string(address_size) + " is not between 1 and " +
                  std::to_string(kMaxHandleAddress) + " (truncated or corrupted)");
  }
  const auto address = bytes.subspan(kHandleAddressOffset, address_size);
  if (checksum(bytes, bytes.subspan(kHandlePortOffset, 8 + address_size)) != sum) {
    return reject("checksum mismatch (corrupted or truncated)");
  }
  const auto padding = bytes.subspan(kHandleAddressOffset + address_size,
                                     kConnectStateOffset - kHandleAddressOffset - address_size);
  if (std::any_of(padding.begin(), padding.end(), [](uint8_t b) { return b != 0; })) {
    return reject("bytes after the address are not zero");
  }
  if (handle.nonce == 0) return reject("nonce is 0");
  if (handle.port == 0) return reject("port is 0");
  const auto reserved = bytes.subspan(kConnectStateOffset + 8, 8);
  if (std::any_of(reserved.begin(), reserved.end(), [](uint8_t b) { return b != 0; })) {
    return reject("the reserved bytes 120-127 are not zero");
  }
  handle.address.assign(address.begin(), address.end());
  return handle;
}

uint64_t read_connect_state(std::span<const uint8_t, kHandleSize> bytes) {
  uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= uint64_t{bytes[kConnectStateOffset + i]} << (8 * i);
  return id;
}

void write_connect_state(std::span<uint8_t, kHandleSize> bytes, uint64_t id) {
  for (int i = 0; i < 8; ++i) bytes[kConnectStateOffset + i] = static_cast<uint8_t>(id >> (8 * i));
}

}  // namespace hmr::nccl
