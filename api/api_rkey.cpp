// C ABI: packed remote keys — hmr_rkey_pack on the MR's side, hmr_rkey_unpack / query /
// release on the peer's (UCX's mkey_pack and rkey_unpack).
#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "api/mr_handle.h"
#include "core/domain.h"
#include "core/remote_key.h"

using hmr::core::Domain;
using hmr::core::from_handle;
using hmr::core::MemoryRegion;
using hmr::core::RemoteKey;

extern "C" {

HMR_API int hmr_rkey_pack(hmr_mr* handle, void* buf, size_t* len) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      if (len == nullptr) return hmr::report_error(HMR_EINVAL, "len pointer is NULL");
      hmr::Result<hmr::core::PackedRkey> packed = region.packed_rkey();
      if (!packed.ok()) return hmr::report(packed.status());
      const size_t needed = packed->packed_size();
      if (*len < needed) {
        const size_t given = *len;
        *len = needed;
        return hmr::report_error(HMR_ETOOSMALL, "packed rkey needs %zu bytes, buffer has %zu",
                                 needed, given);
      }
      if (buf == nullptr) return hmr::report_error(HMR_EINVAL, "buf is NULL");
      packed->encode(static_cast<uint8_t*>(buf));
      *len = needed;
      return 0;
    });
  });
}

HMR_API int hmr_rkey_unpack(hmr_domain* handle, const void* buf, size_t len, hmr_rkey** rkey) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    if (rkey == nullptr) return hmr::report_error(HMR_EINVAL, "rkey output pointer is NULL");
    if (buf == nullptr) return hmr::report_error(HMR_EINVAL, "buf is NULL");
    auto unpacked =
        RemoteKey::unpack(*domain, std::span(static_cast<const uint8_t*>(buf), len));
    if (!unpacked.ok()) return hmr::report(unpacked.status());
    *rkey = hmr::core::to_handle<hmr_rkey>(*unpacked);
    return 0;
  });
}

HMR_API int hmr_rkey_query(hmr_rkey* handle, hmr_rkey_info* info) {
  return hmr::guarded([&] {
    const RemoteKey* rkey = from_handle<RemoteKey>(handle);
    if (rkey == nullptr) return hmr::report_bad_handle(handle, "not an rkey handle");
    auto copy = hmr::core::read_extensible(info, sizeof(hmr_rkey_info), "hmr_rkey_info");
    if (!copy.ok()) return hmr::report(copy.status());
    rkey->describe(*copy);
    hmr::core::write_extensible(info, *copy);
    return 0;
  });
}

HMR_API int hmr_rkey_release(hmr_rkey* handle) {
  return hmr::guarded([&] {
    RemoteKey* rkey = from_handle<RemoteKey>(handle);
    if (rkey == nullptr) return hmr::close_bad_handle(handle, "not an rkey handle");
    return hmr::report(rkey->release());
  });
}

}  // extern "C"
