// hmr's registration request as libfabric's fi_mr_attr and fi_mr_regattr flags.
//
// fi_mr_attr grows by appending (1.17 ends at `device`; 1.19 adds hmem_data, 1.20 a dma-buf
// member in a union with mr_iov, 1.22 page_size), and a provider reads only as much as the
// API version its fabric was opened with describes.  So the newer fields are compiled in
// exactly when the headers hmr is built with have them, and used only when the runtime's API
// version has them too; a request needing one that is missing is refused, never dropped.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>

#include "nic/nic.h"
#include "util/status.h"

#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 19))
#define HMR_OFI_HAS_HMEM_DATA 1
#else
#define HMR_OFI_HAS_HMEM_DATA 0
#endif
#if defined(FI_MR_DMABUF)
#define HMR_OFI_HAS_DMABUF 1
#else
#define HMR_OFI_HAS_DMABUF 0
#endif
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 22))
#define HMR_OFI_HAS_PAGE_SIZE 1
#else
#define HMR_OFI_HAS_PAGE_SIZE 0
#endif

namespace hmr::nic::ofi {

// What fi_mr_regattr is called with.  Not copyable: attr may point at dmabuf.  attr comes
// first, and newer_members right after it (checked where it is filled).
struct MrAttr {
  MrAttr() = default;
  MrAttr(const MrAttr&) = delete;
  MrAttr& operator=(const MrAttr&) = delete;

  fi_mr_attr attr{};
  // Zeros right after attr, for the members newer libfabrics append (1.19 hmem_data, 1.22
  // page_size, 2.0 base_mr and sub_mr_cnt).  A provider reads fi_mr_attr as long as its
  // fabric's API version says (libfabric's ofi_mr_update_attr copies by
  // domain->fabric->api_version), and the fabric of a domain the application opened and hmr
  // wraps may speak a newer version than the headers hmr was built with: without this, such
  // a provider read `flags` below as hmem_data and the stack beyond as page_size.  Zero is
  // each new member's "not given".
  unsigned char newer_members[128]{};
  uint64_t flags = 0;
#if HMR_OFI_HAS_DMABUF
  fi_mr_dmabuf dmabuf{};
#endif
};

// The key hmr asks for when it chooses one, from the process's running count (1, 2, ...): a
// number a key of `key_size` bytes holds, never 0.  The count wraps within that range, so a
// provider of narrow keys (opx: 2 bytes, requested keys past its table refused with
// -FI_EKEYREJECTED) gets keys released long ago again instead of numbers it cannot hold, and
// keys still in use are skipped by the provider's -FI_ENOKEY.
uint64_t chosen_key(uint64_t count, size_t key_size);
// How far the count moves on after the `attempt`-th collision (1, 2, ...): 1, 2, 4, ... keys,
// so a block of keys the application uses is passed in a few attempts, but never more than
// 1/128 of the key space, so the first 64 attempts are 64 different keys spread over at most
// half of it.  (Doubling alone came round mod 2^16 - 1 after 16 attempts for 2-byte keys, 32
// for 4-byte ones: most of the space was never tried, found by a review.)
uint64_t chosen_key_stride(int attempt, size_t key_size);

// Fills `out` from `request` with `key` as requested_key.  `api_version` is the version the
// domain's fabric speaks; `who` names libfabric and the provider in reasons.  Fails with
// HMR_ENOSYS for a dma-buf, hmem_data or page_size this build or runtime cannot carry, and
// HMR_EOPNOTSUPP for HMR_RMA_EVENT (hmr counters are not libfabric counters).
Status build_mr_attr(const RegistrationRequest& request, uint64_t key, uint32_t api_version,
                     const std::string& who, MrAttr& out);

}  // namespace hmr::nic::ofi
