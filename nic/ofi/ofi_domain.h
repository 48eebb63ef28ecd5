// The libfabric domain an ofi NIC registers on, and the fi_info that describes it.
//
// Either the application's own (borrowed: hmr never closes it) or one hmr opened from
// nic_options (owned: domain, fabric and fi_info close with it, in that order).
//
// libfabric 1.17 has no call that reads a domain's attributes back from a struct fid_domain,
// so for a borrowed domain the application states the provider and the mr_mode it opened it
// with, and hmr asks fi_getinfo the same question to learn the provider's limits.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <memory>
#include <string>

#include "nic/ofi/ofi_library.h"
#include "nic/ofi/ofi_options.h"
#include "util/status.h"

namespace hmr::nic::ofi {

// The mr_mode bits hmr offers when it opens a domain itself and nic_options names none:
// everything the adapter honours.  ENDPOINT and RMA_EVENT would tie MRs to libfabric
// endpoints and counters, which hmr's are not.
inline constexpr uint64_t kDefaultModeHints = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR |
                                              FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                              FI_MR_MMU_NOTIFY | FI_MR_HMEM;

class OfiDomain {
 public:
  // Wraps `handle` (a struct fid_domain *) when it is not null, else opens a domain.
  static Result<std::unique_ptr<OfiDomain>> open(const OfiLibrary& library,
                                                 const OfiOptions& options, void* handle);
  ~OfiDomain();
  OfiDomain(const OfiDomain&) = delete;
  OfiDomain& operator=(const OfiDomain&) = delete;

  fid_domain* domain() const { return domain_; }
  const fi_info& info() const { return *info_; }
  // The mr_mode in force on the domain (libfabric's bits).
  uint64_t mr_mode() const { return mr_mode_; }
  // Whether the application serializes every call on the domain (a domain it opened with
  // FI_THREAD_DOMAIN and wraps, saying so with threading=): then no thread of hmr's own may
  // call it.  hmr's own domains are FI_THREAD_SAFE.
  bool serialized_by_application() const {
    return options_.threading.has_value() && *options_.threading == FI_THREAD_DOMAIN;
  }
  // "libfabric 1.17 provider tcp;ofi_rxm", for reasons.
  const std::string& who() const { return who_; }

  // Whether the provider offers FI_HMEM at all (asks fi_getinfo; for reasons only).
  bool provider_offers_hmem() const;

  // Closes the domain and fabric hmr opened (nothing for the application's own domain).
  // HMR_EBUSY while objects the application opened on the domain are open: libfabric refuses
  // to close it then (fi_domain(3), fi_close).  Both are then left open for good: libfabric
  // 1.17's rxm has already closed its core domain when it refuses, and a second fi_close frees
  // it again (seen: glibc's "double free" abort), so hmr never asks twice.
  Status close_own();

 private:
  struct InfoDeleter {
    const OfiLibrary* library;
    void operator()(fi_info* info) const { library->fn.fi_freeinfo(info); }
  };
  using InfoList = std::unique_ptr<fi_info, InfoDeleter>;
  struct FidCloser {
    void operator()(fid* object) const { fi_close(object); }
  };
  using OwnedFid = std::unique_ptr<fid, FidCloser>;

  OfiDomain(const OfiLibrary& library, const OfiOptions& options);
  // fi_getinfo with the options' hints; picks the answer the options name.
  Status find_info(uint64_t mode_hints, uint64_t extra_caps, fi_threading threading);
  Status open_own();
  Status wrap(void* handle);
  Result<InfoList> query(uint64_t mode_hints, uint64_t caps, fi_threading threading) const;

  const OfiLibrary& library_;
  OfiOptions options_;
  InfoList infos_;
  const fi_info* info_ = nullptr;
  OwnedFid fabric_;            // before owned_domain_: closed after it
  OwnedFid owned_domain_;
  fid_domain* domain_ = nullptr;
  uint64_t mr_mode_ = 0;
  std::string who_;
};

}  // namespace hmr::nic::ofi
