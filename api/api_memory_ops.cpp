// C ABI: the memory operations beyond registration — re-registration, memory windows, advice,
// indirect keys — and which of them a domain's NIC has (hmr_md_query_op).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "api/mr_handle.h"
#include "core/domain.h"
#include "core/memory_window.h"
#include "util/enum_bits.h"

using hmr::core::Domain;
using hmr::core::from_handle;
using hmr::core::MemoryRegion;
using hmr::core::MemoryWindow;

namespace {

// The most segments one indirect key takes (a KLM list of mlx5 holds this order of entries).
constexpr size_t kMaxIndirectSegments = 256;

// Reads the optional post argument of the window calls: NULL, or a struct of a known size.
hmr::Result<const hmr_mw_post*> read_post(const hmr_mw_post* post, hmr_mw_post& copy) {
  if (post == nullptr) return static_cast<const hmr_mw_post*>(nullptr);
  hmr::Result<hmr_mw_post> read = hmr::core::read_extensible(post, sizeof(hmr_mw_post), "hmr_mw_post");
  if (!read.ok()) return read.status();
  copy = *read;
  return static_cast<const hmr_mw_post*>(&copy);
}

}  // namespace

extern "C" {

HMR_API int hmr_mr_rereg(hmr_mr* handle, uint64_t flags, const struct hmr_mr_rereg_attr* attr) {
  return hmr::guarded([&] {
    auto copy = hmr::core::read_extensible(attr, sizeof(hmr_mr_rereg_attr), "hmr_mr_rereg_attr");
    if (!copy.ok()) return hmr::report(copy.status());
    // Refused flags need no MR of its own: a hit handle is promoted only for a real request.
    const hmr::Status flags_ok = MemoryRegion::check_rereg_flags(flags);
    if (!flags_ok.ok()) return hmr::report(flags_ok);
    MemoryRegion* region = hmr::owned_memory_region(handle);
    if (region == nullptr) return hmr::report_bad_handle(handle, "not an MR handle");
    return hmr::report(region->rereg(flags, *copy));
  });
}

HMR_API int hmr_mem_advise(hmr_mr* handle, const void* addr, size_t len,
                           enum hmr_mem_advice advice) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      return hmr::report(region.advise(addr, len, hmr::core::enum_bits(advice)));
    });
  });
}

HMR_API int hmr_mr_reg_indirect(hmr_domain* handle, const struct hmr_mr_segment* segments,
                                size_t count, uint64_t access, hmr_mr** mr) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    if (mr == nullptr) return hmr::report_error(HMR_EINVAL, "mr output pointer is NULL");
    if (segments == nullptr || count == 0) {
      return hmr::report_error(HMR_EINVAL, "an indirect key needs at least one segment");
    }
    if (count > kMaxIndirectSegments) {
      return hmr::report_error(HMR_EINVAL, "%zu segments; an indirect key takes at most %zu",
                               count, kMaxIndirectSegments);
    }
    if (access == 0 || (access & ~hmr::core::kCacheableAccess) != 0) {
      return hmr::report_error(HMR_EINVAL, "indirect key access %#llx: name known access bits "
                               "(HMR_MW_BIND is not one for indirect keys)",
                               static_cast<unsigned long long>(access));
    }
    std::vector<Domain::IndirectPiece> pieces;
    pieces.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      // An unknown handle stays null here and is refused with its index by the domain.
      MemoryRegion* part = hmr::owned_memory_region(segments[i].mr);
      if (part == nullptr && hmr::core::made_before_fork(segments[i].mr)) {
        return hmr::report_bad_handle(segments[i].mr, "not an MR handle");
      }
      pieces.push_back({part, reinterpret_cast<uintptr_t>(segments[i].addr), segments[i].len});
    }
    hmr::Result<MemoryRegion*> region = domain->register_indirect(pieces, access);
    if (!region.ok()) return hmr::report(region.status());
    *mr = hmr::core::to_handle<hmr_mr>(*region);
    return 0;
  });
}

HMR_API int hmr_mw_alloc(hmr_domain* handle, enum hmr_mw_type type, hmr_mw** mw) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    if (mw == nullptr) return hmr::report_error(HMR_EINVAL, "mw output pointer is NULL");
    // The enum's bits, read as an int: a C caller may pass any value (util/enum_bits.h).
    hmr::Result<MemoryWindow*> window = MemoryWindow::allocate(*domain, hmr::core::enum_bits(type));
    if (!window.ok()) return hmr::report(window.status());
    *mw = hmr::core::to_handle<hmr_mw>(*window);
    return 0;
  });
}

HMR_API int hmr_mw_bind(hmr_mw* handle, hmr_mr* mr, const void* addr, size_t len,
                        uint64_t access, const struct hmr_mw_post* post, uint64_t* key) {
  return hmr::guarded([&] {
    MemoryWindow* window = from_handle<MemoryWindow>(handle);
    if (window == nullptr) return hmr::report_bad_handle(handle, "not a memory window handle");
    if (key == nullptr) return hmr::report_error(HMR_EINVAL, "key output pointer is NULL");
    hmr_mw_post copy{};
    hmr::Result<const hmr_mw_post*> posting = read_post(post, copy);
    if (!posting.ok()) return hmr::report(posting.status());
    // A cache hit is never bindable (HMR_MW_BIND MRs are not cached), so the view of it
    // that with_memory_region makes is refused before the window could hold it.
    return hmr::with_memory_region(mr, [&](MemoryRegion& region) {
      hmr::Result<uint64_t> bound =
          window->bind(region, reinterpret_cast<uintptr_t>(addr), len, access, *posting);
      if (!bound.ok()) return hmr::report(bound.status());
      *key = *bound;
      return 0;
    });
  });
}

HMR_API int hmr_mw_invalidate(hmr_mw* handle, const struct hmr_mw_post* post) {
  return hmr::guarded([&] {
    MemoryWindow* window = from_handle<MemoryWindow>(handle);
    if (window == nullptr) return hmr::report_bad_handle(handle, "not a memory window handle");
    hmr_mw_post copy{};
    hmr::Result<const hmr_mw_post*> posting = read_post(post, copy);
    if (!posting.ok()) return hmr::report(posting.status());
    return hmr::report(window->invalidate(*posting));
  });
}

HMR_API int hmr_mw_close(hmr_mw* handle) {
  return hmr::guarded([&] {
    MemoryWindow* window = from_handle<MemoryWindow>(handle);
    if (window == nullptr) return hmr::close_bad_handle(handle, "not a memory window handle");
    return hmr::report(window->close());
  });
}

HMR_API int hmr_md_query_op(hmr_domain* handle, enum hmr_md_op op, char* reason,
                            size_t reason_size) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    const int op_bits = hmr::core::enum_bits(op);
    if (op_bits < 0 || op_bits >= HMR_MD_OP_COUNT) {
      return hmr::report_error(HMR_EINVAL, "operation %d: use an enum hmr_md_op value", op_bits);
    }
    const hmr::nic::Support support = domain->operation_support(static_cast<hmr_md_op>(op_bits));
    if (support.available) return 1;
    if (reason != nullptr && reason_size > 0) {
      std::snprintf(reason, reason_size, "%s", support.reason.c_str());
    }
    return 0;
  });
}

}  // extern "C"
