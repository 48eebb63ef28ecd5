#include "core/remote_key.h"

#include <cstring>

#include "core/domain.h"

namespace hmr::core {

Result<RemoteKey*> RemoteKey::unpack(Domain& domain, std::span<const uint8_t> bytes) {
  Result<PackedRkey> packed = PackedRkey::decode(bytes);
  if (!packed.ok()) return packed.status();
  Result<NicIdentity> ours = nic_identity_of(domain.nic().capabilities().name);
  if (!ours.ok()) return ours.status();
  if (packed->nic.kind != ours->kind) {
    return make_error(HMR_EINVAL,
                      "packed rkey is for a NIC of kind '%s'; this domain's NIC is of kind '%s'",
                      nic_kind_name(packed->nic.kind), nic_kind_name(ours->kind));
  }
  if (packed->nic.provider != ours->provider) {
    return make_error(HMR_EINVAL, "packed rkey is from another libfabric provider than this "
                      "domain's (%s)", domain.nic().capabilities().name.c_str());
  }
  const bool raw = (packed->flags & PackedRkey::kRawKey) != 0;
  if (raw != domain.raw_keys()) {
    return make_error(HMR_EINVAL, "packed rkey holds a %s key; this domain's keys are %s",
                      raw ? "raw (HMR_MR_RAW)" : "64-bit", domain.raw_keys() ? "raw" : "64-bit");
  }
  Result<uint64_t> key = domain.map_peer_key(packed->key);
  if (!key.ok()) return key.status();
  RemoteKey* made = nullptr;
  try {
    made = new RemoteKey(domain, *packed, *key);
  } catch (...) {  // (no memory for the object: the mapping goes back, nothing is counted)
    (void)domain.unmap_peer_key(*key);
    throw;
  }
  domain.object_opened();
  return made;
}

Status RemoteKey::release() {
  Status unmapped = domain_.unmap_peer_key(key_);
  domain_.object_closed();
  delete this;
  return unmapped;
}

void RemoteKey::describe(hmr_rkey_info& info) const {
  info.addr = packed_.addr;
  info.length = packed_.length;
  info.key = key_;
  info.iface = static_cast<hmr_hmem_iface>(packed_.iface);
  info.device = packed_.device;
  info.raw_key_size = packed_.key.size;
  std::memset(info.raw_key, 0, sizeof info.raw_key);
  std::memcpy(info.raw_key, packed_.key.bytes, packed_.key.size);
}

}  // namespace hmr::core
