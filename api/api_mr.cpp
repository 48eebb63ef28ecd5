// C ABI: memory regions and keys.
#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "api/mr_handle.h"
#include "core/counter.h"
#include "core/domain.h"
#include "core/endpoint.h"
#include "core/memory_region.h"
#include "util/enum_bits.h"

using hmr::core::CachedMr;
using hmr::core::Counter;
using hmr::core::Domain;
using hmr::core::Endpoint;
using hmr::core::from_handle;
using hmr::core::MemoryRegion;
using Probe = hmr::core::RegistrationCache::Probe;

namespace {

// `probed`: what the hit path learnt of this request, if it looked (Domain::register_memory).
int register_attr(hmr_domain* handle, const hmr_mr_attr& attr, uint64_t flags, hmr_mr** mr,
                  Probe probed = Probe::not_done) {
  Domain* domain = from_handle<Domain>(handle);
  if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
  if (mr == nullptr) return hmr::report_error(HMR_EINVAL, "mr output pointer is NULL");
  auto registered = domain->register_memory(attr, flags, probed, mr);
  if (!registered.ok()) return hmr::report(registered.status());
  if (registered->written) return 0;  // (asynchronous: *mr may be the application's again)
  *mr = registered->shared != nullptr ? hmr::core::to_handle<hmr_mr>(registered->shared)
                                      : hmr::core::to_handle<hmr_mr>(registered->region);
  return 0;
}

hmr_mr_attr iov_attr(const struct iovec* iov, size_t count, uint64_t access, uint64_t offset,
                     uint64_t requested_key, void* context) {
  hmr_mr_attr attr{};
  attr.size = sizeof attr;
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  attr.iface = HMR_HMEM_SYSTEM;
  return attr;
}

}  // namespace

extern "C" {

HMR_API int hmr_mr_reg(hmr_domain* domain, const void* buf, size_t len, uint64_t access,
                       uint64_t offset, uint64_t requested_key, uint64_t flags, hmr_mr** mr,
                       void* context) {
  return hmr::guarded([&] {
    // The hit path (core/hit_path.cpp); anything it does not serve goes the full way below.
    Domain* target = from_handle<Domain>(domain);
    Probe probed = Probe::not_done;
    if (target != nullptr && mr != nullptr && flags == 0 && offset == 0) {
      if (CachedMr* hit = target->try_cached_hit(buf, len, access, context, probed)) {
        *mr = hmr::core::to_handle<hmr_mr>(hit);
        return 0;
      }
      // Not a host hit: device memory the device cache holds, if it holds anything.
      if (CachedMr* hit = target->try_device_hit(buf, len, access, context)) {
        *mr = hmr::core::to_handle<hmr_mr>(hit);
        return 0;
      }
    }
    const iovec segment = {const_cast<void*>(buf), len};
    return register_attr(domain, iov_attr(&segment, 1, access, offset, requested_key, context),
                         flags, mr, probed);
  });
}

HMR_API int hmr_mr_regv(hmr_domain* domain, const struct iovec* iov, size_t count,
                        uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags,
                        hmr_mr** mr, void* context) {
  return hmr::guarded([&] {
    Domain* target = from_handle<Domain>(domain);
    Probe probed = Probe::not_done;
    if (target != nullptr && mr != nullptr && flags == 0 && offset == 0 && iov != nullptr &&
        count == 1) {
      if (CachedMr* hit =
              target->try_cached_hit(iov->iov_base, iov->iov_len, access, context, probed)) {
        *mr = hmr::core::to_handle<hmr_mr>(hit);
        return 0;
      }
      if (CachedMr* hit = target->try_device_hit(iov->iov_base, iov->iov_len, access, context)) {
        *mr = hmr::core::to_handle<hmr_mr>(hit);
        return 0;
      }
    }
    return register_attr(domain, iov_attr(iov, count, access, offset, requested_key, context),
                         flags, mr, probed);
  });
}

HMR_API int hmr_mr_regattr(hmr_domain* domain, const hmr_mr_attr* attr, uint64_t flags,
                           hmr_mr** mr) {
  return hmr::guarded([&] {
    auto copy = hmr::core::read_extensible(attr, sizeof(hmr_mr_attr), "hmr_mr_attr");
    if (!copy.ok()) return hmr::report(copy.status());
    // A plain registration of one range (device memory declared, as the NCCL plugin declares
    // NCCL_PTR_CUDA buffers, or not) may be a device hit; anything else, and every error, is
    // the full path's.
    Domain* target = from_handle<Domain>(domain);
    const hmr_mr_attr& a = *copy;
    const int iface = hmr::core::enum_bits(a.iface);  // (any int may be there: not an enum load)
    if (target != nullptr && mr != nullptr && (flags & ~HMR_MR_REPORTED_BASE) == 0 &&
        a.mr_iov != nullptr && a.iov_count == 1 && a.offset == 0 && a.dmabuf == nullptr &&
        a.auth_key_size == 0 && a.hmem_data == nullptr && a.page_size == 0 && iface >= 0 &&
        iface < HMR_HMEM_IFACE_COUNT &&
        // (SYSTEM with a device is refused by the full path: a hit must not let it in)
        (iface != HMR_HMEM_SYSTEM || a.device.reserved == 0)) {
      hmr::core::DeviceDeclaration declared;
      declared.iface = iface;
      declared.device = a.device.reserved;
      declared.reported_base = (flags & HMR_MR_REPORTED_BASE) != 0;
      if (CachedMr* hit = target->try_device_hit(a.mr_iov->iov_base, a.mr_iov->iov_len, a.access,
                                                 a.context, declared)) {
        *mr = hmr::core::to_handle<hmr_mr>(hit);
        return 0;
      }
    }
    return register_attr(domain, *copy, flags, mr);
  });
}

HMR_API int hmr_mr_close(hmr_mr* handle) {
  return hmr::guarded([&] {
    if (CachedMr* hit = from_handle<CachedMr>(handle)) {
      if (__builtin_expect(hit->promoted() != nullptr, 0)) {
        return hmr::report(hit->domain().close_promoted(hit));
      }
      hit->domain().close_cached(hit);
      return 0;
    }
    MemoryRegion* region = from_handle<MemoryRegion>(handle);
    if (region == nullptr) {
      return hmr::close_bad_handle(handle, "not an MR handle: closed already (an MR is closed "
                                   "once), or never one");
    }
    return hmr::report(region->domain().close_memory_region(region));
  });
}

HMR_API void* hmr_mr_desc(hmr_mr* handle) {
  if (const CachedMr* hit = from_handle<CachedMr>(handle)) return hit->desc();
  MemoryRegion* region = from_handle<MemoryRegion>(handle);
  if (region == nullptr) {
    hmr::report_bad_handle(handle, "not an MR handle");
    return nullptr;
  }
  return region->desc();
}

HMR_API uint64_t hmr_mr_key(hmr_mr* handle) {
  if (const CachedMr* hit = from_handle<CachedMr>(handle)) return hit->key();
  MemoryRegion* region = from_handle<MemoryRegion>(handle);
  if (region == nullptr) {
    hmr::report_bad_handle(handle, "not an MR handle");
    return HMR_KEY_NOTAVAIL;
  }
  return region->key();
}

HMR_API int hmr_mr_raw_attr(hmr_mr* handle, uint64_t* base_addr, uint8_t* raw_key,
                            size_t* key_size, uint64_t flags) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      if (flags != 0) return hmr::report_error(HMR_EBADFLAGS, "hmr_mr_raw_attr takes flags 0");
      return hmr::report(region.raw_attr(base_addr, raw_key, key_size));
    });
  });
}

HMR_API int hmr_mr_map_raw(hmr_domain* handle, uint64_t base_addr, const uint8_t* raw_key,
                           size_t key_size, uint64_t* key, uint64_t flags) {
  (void)base_addr;  // the base travels with RMA addresses; a mapping needs only the key
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    if (flags != 0) return hmr::report_error(HMR_EBADFLAGS, "hmr_mr_map_raw takes flags 0");
    if (raw_key == nullptr || key == nullptr) {
      return hmr::report_error(HMR_EINVAL, "raw_key and key must not be NULL");
    }
    if (key_size > hmr::KeyBytes::kMaxSize) {
      return hmr::report_error(HMR_EINVAL, "raw key of %zu bytes; this domain's keys are %zu",
                               key_size, domain->rules().key_size);
    }
    hmr::KeyBytes bytes;
    bytes.size = key_size;
    std::memcpy(bytes.bytes, raw_key, key_size);
    hmr::Result<uint64_t> mapped = domain->map_peer_key(bytes);
    if (!mapped.ok()) return hmr::report(mapped.status());
    *key = *mapped;
    return 0;
  });
}

HMR_API int hmr_mr_unmap_key(hmr_domain* handle, uint64_t key) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    return hmr::report(domain->unmap_peer_key(key));
  });
}

HMR_API int hmr_mr_bind(hmr_mr* handle, hmr_fid* bfid, uint64_t flags) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      if (Endpoint* endpoint = from_handle<Endpoint>(bfid)) {
        return hmr::report(region.bind_endpoint(*endpoint, flags));
      }
      if (Counter* counter = from_handle<Counter>(bfid)) {
        return hmr::report(region.bind_counter(*counter, flags));
      }
      return hmr::report_bad_handle(
          bfid, "an MR binds an endpoint or a counter (hmr_ep_fid / hmr_cntr_fid)");
    });
  });
}

HMR_API int hmr_mr_enable(hmr_mr* handle) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle,
                                   [](MemoryRegion& region) { return hmr::report(region.enable()); });
  });
}

HMR_API int hmr_mr_refresh(hmr_mr* handle, const struct iovec* iov, size_t count,
                           uint64_t flags) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      if (flags != 0) return hmr::report_error(HMR_EBADFLAGS, "hmr_mr_refresh takes flags 0");
      return hmr::report(region.refresh(iov, count));
    });
  });
}

}  // extern "C"
