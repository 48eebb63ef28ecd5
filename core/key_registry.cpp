#include "core/key_registry.h"

namespace hmr::core {

Status RequestedKeys::reserve(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_use_.insert(key).second) {
    // The usual cause: a domain opened without HMR_MR_PROV_KEY, where every registration's
    // requested_key (0 when not thought about) is the key, and must differ.
    return make_error(HMR_ENOKEY, "requested key %#llx is already in use in this domain: without "
                      "HMR_MR_PROV_KEY in the domain's mr_mode each MR needs a key of its own "
                      "(requested_key); with it the NIC chooses keys, and cached registrations "
                      "can be shared",
                      static_cast<unsigned long long>(key));
  }
  return ok_status();
}

void RequestedKeys::release(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_.erase(key);
}

uint64_t MappedRawKeys::map(const KeyBytes& raw_key) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  while (mapped_.count(next_key_) != 0 || next_key_ == HMR_KEY_NOTAVAIL) ++next_key_;
  const uint64_t key = next_key_++;
  mapped_.emplace(key, raw_key);
  return key;
}

Status MappedRawKeys::unmap(uint64_t key) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (mapped_.erase(key) == 0) {
    return make_error(HMR_ENOENT, "key %#llx was not mapped by hmr_mr_map_raw in this domain",
                      static_cast<unsigned long long>(key));
  }
  return ok_status();
}

std::optional<KeyBytes> MappedRawKeys::find(uint64_t key) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = mapped_.find(key);
  if (it == mapped_.end()) return std::nullopt;
  return it->second;
}

}  // namespace hmr::core
