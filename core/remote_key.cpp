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
    return make_error(HMR_EINVAL, "packed rkey is from a %s NIC; this domain's NIC is %s",
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
  if (packed->key.size != domain.rules().key_size) {
    return make_error(HMR_EINVAL, "packed rkey has a %zu-byte key; this domain's keys are %zu",
                      packed->key.size, domain.rules().key_size);
  }
  const uint64_t key = raw ? domain.mapped_keys().map(packed->key) : packed->key.low_u64();
  domain.object_opened();
  return new RemoteKey(domain, *packed, key);
}

Status RemoteKey::release() {
  Status unmapped = ok_status();
  if ((packed_.flags & PackedRkey::kRawKey) != 0) unmapped = domain_.mapped_keys().unmap(key_);
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
