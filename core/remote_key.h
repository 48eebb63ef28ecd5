// A peer's MR as this domain sees it: a packed rkey (core/packed_rkey.h) checked against the
// domain and turned into what its data transfers take — the address of the MR's first byte
// and a 64-bit key, mapped from the raw key in HMR_MR_RAW domains.
#pragma once

#include <hmr/hmr.h>

#include <cstdint>
#include <span>

#include "core/packed_rkey.h"
#include "util/object.h"
#include "util/status.h"

namespace hmr::core {

class Domain;

class RemoteKey : public Tagged<ObjectClass::remote_key> {
 public:
  // Checks the bytes, then that they suit `domain` (its NIC kind and provider, key size and
  // key format); every refusal says which field.
  static Result<RemoteKey*> unpack(Domain& domain, std::span<const uint8_t> bytes);
  // Unmaps the key and deletes the object.
  Status release();

  void describe(hmr_rkey_info& info) const;

 private:
  RemoteKey(Domain& domain, const PackedRkey& packed, uint64_t key)
      : domain_(domain), packed_(packed), key_(key) {}
  ~RemoteKey() = default;

  Domain& domain_;
  const PackedRkey packed_;
  const uint64_t key_;  // for hmr_ep_*: the raw key's mapping, or the key itself
};

}  // namespace hmr::core
