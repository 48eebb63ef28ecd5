#include "core/packed_rkey.h"

#include <hmr/hmr.h>

namespace hmr::core {
namespace {

uint32_t fnv1a(const uint8_t* bytes, size_t size) {
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

void put(uint8_t* out, uint64_t value, size_t size) {
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t get(const uint8_t* in, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

}  // namespace

void PackedRkey::encode(uint8_t* out) const {
  put(out + 0, kMagic, 4);
  put(out + 4, kVersion, 1);
  put(out + 5, kHeaderSize, 1);
  put(out + 6, static_cast<uint8_t>(nic.kind), 1);
  put(out + 7, key.size, 1);
  put(out + 8, flags, 2);
  put(out + 10, iface, 2);
  put(out + 12, nic.provider, 4);
  put(out + 16, device, 8);
  put(out + 24, addr, 8);
  put(out + 32, length, 8);
  for (size_t i = 0; i < key.size; ++i) out[kHeaderSize + i] = key.bytes[i];
  const size_t body = kHeaderSize + key.size;
  put(out + body, fnv1a(out, body), 4);
}

Result<PackedRkey> PackedRkey::decode(std::span<const uint8_t> bytes) {
  const uint8_t* in = bytes.data();
  // The fixed part first: nothing after it is read before the length is known to cover it.
  if (bytes.size() < 8) {
    return make_error(HMR_EINVAL, "packed rkey of %zu bytes is truncated: the fixed header "
                      "alone is 8", bytes.size());
  }
  if (get(in, 4) != kMagic) {
    return make_error(HMR_EINVAL, "not a packed rkey: the magic is %#llx, hmr_rkey_pack writes "
                      "%#x", static_cast<unsigned long long>(get(in, 4)), kMagic);
  }
  const unsigned version = in[4];
  if (version != kVersion) {
    return make_error(HMR_EINVAL, "packed rkey version %u; this hmr reads version %u", version,
                      kVersion);
  }
  const size_t header = in[5];
  const size_t key_size = in[7];
  if (header != kHeaderSize) {
    return make_error(HMR_EINVAL, "packed rkey header of %zu bytes; version 1 has %zu", header,
                      kHeaderSize);
  }
  if (key_size == 0 || key_size > KeyBytes::kMaxSize) {
    return make_error(HMR_EINVAL, "packed rkey key size %zu outside 1..%zu", key_size,
                      KeyBytes::kMaxSize);
  }
  const size_t expected = header + key_size + kChecksumSize;
  if (bytes.size() != expected) {
    return make_error(HMR_EINVAL, "packed rkey of %zu bytes; its header and key size make %zu",
                      bytes.size(), expected);
  }
  const uint32_t checksum = static_cast<uint32_t>(get(in + header + key_size, 4));
  if (checksum != fnv1a(in, header + key_size)) {
    return make_error(HMR_EINVAL, "packed rkey checksum does not match its bytes (corrupted "
                      "in transit?)");
  }
  PackedRkey rkey;
  const unsigned kind = in[6];
  if (kind < static_cast<unsigned>(NicKind::sim) || kind > static_cast<unsigned>(NicKind::callback)) {
    return make_error(HMR_EINVAL, "packed rkey names NIC kind %u, which hmr does not know", kind);
  }
  rkey.nic.kind = static_cast<NicKind>(kind);
  rkey.flags = static_cast<uint16_t>(get(in + 8, 2));
  if (rkey.flags & ~kKnownFlags) {
    return make_error(HMR_EINVAL, "packed rkey flags %#x have unknown bits %#x", rkey.flags,
                      rkey.flags & ~kKnownFlags);
  }
  rkey.iface = static_cast<uint16_t>(get(in + 10, 2));
  if (rkey.iface >= HMR_HMEM_IFACE_COUNT) {
    return make_error(HMR_EINVAL, "packed rkey memory iface %u is not one of hmr's 0..%d",
                      rkey.iface, HMR_HMEM_IFACE_COUNT - 1);
  }
  rkey.nic.provider = static_cast<uint32_t>(get(in + 12, 4));
  if (rkey.nic.kind != NicKind::ofi && rkey.nic.provider != 0) {
    return make_error(HMR_EINVAL, "packed rkey of a %s NIC carries a provider identity",
                      nic_kind_name(rkey.nic.kind));
  }
  rkey.device = get(in + 16, 8);
  rkey.addr = get(in + 24, 8);
  rkey.length = get(in + 32, 8);
  // (Empty is a zero-byte MR's, which registers and packs: a peer's RMA of any byte through
  // it is outside the range.)
  if (rkey.addr + rkey.length < rkey.addr) {
    return make_error(HMR_EINVAL, "packed rkey range [%#llx, +%llu) wraps",
                      static_cast<unsigned long long>(rkey.addr),
                      static_cast<unsigned long long>(rkey.length));
  }
  rkey.key.size = key_size;
  for (size_t i = 0; i < key_size; ++i) rkey.key.bytes[i] = in[header + i];
  return rkey;
}

Result<NicIdentity> nic_identity_of(std::string_view name) {
  const std::string_view kind = name.substr(0, name.find(':'));
  const std::string_view detail =
      name.find(':') == std::string_view::npos ? std::string_view() : name.substr(name.find(':') + 1);
  NicIdentity identity;
  if (kind == "sim") {
    identity.kind = NicKind::sim;
  } else if (kind == "verbs") {
    identity.kind = NicKind::verbs;
  } else if (kind == "callback") {
    identity.kind = NicKind::callback;
  } else if (kind == "ofi") {
    identity.kind = NicKind::ofi;
    identity.provider = fnv1a(reinterpret_cast<const uint8_t*>(detail.data()), detail.size());
  } else {
    return make_error(HMR_ENOSYS, "NIC '%.*s' has no packed key format",
                      static_cast<int>(name.size()), name.data());
  }
  return identity;
}

const char* nic_kind_name(NicKind kind) {
  switch (kind) {
    case NicKind::sim: return "sim";
    case NicKind::ofi: return "ofi";
    case NicKind::verbs: return "verbs";
    case NicKind::callback: return "callback";
  }
  return "unknown";
}

}  // namespace hmr::core
