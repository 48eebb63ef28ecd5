// The libfabric NIC adapter: hmr's registrations made with fi_mr_regattr on a libfabric
// domain, the application's own or one opened by provider name.  Descriptors and keys are
// the provider's.  libfabric is dlopen'ed when the first ofi NIC opens, never linked.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "nic/nic.h"
#include "nic/ofi/ofi_domain.h"
#include "nic/ofi/ofi_library.h"

namespace hmr::nic::ofi {

class OfiNic final : public Nic {
 public:
  // `handle`: the application's struct fid_domain*, or null to open one from `options`.
  static Result<std::unique_ptr<Nic>> open(const char* options, void* handle);

  const Capabilities& capabilities() const override { return capabilities_; }
  Result<Registration> register_memory(const RegistrationRequest& request) override;
  Status deregister(Registration& registration) override;
  Status refresh(Registration& registration, std::span<const iovec> segments) override;
  void* native_handle() const override { return domain_->domain(); }
  Status close_native() override { return domain_->close_own(); }

 private:
  OfiNic(const OfiLibrary& library, std::unique_ptr<OfiDomain> domain);
  Status describe();
  // Refuses device memory the domain cannot take, with the reason that applies.
  Status check_device_memory(const RegistrationRequest& request) const;
  Status failure(const RegistrationRequest& request, uint64_t key, int rc) const;
  Result<Registration> describe_registration(const RegistrationRequest& request, fid_mr* mr) const;

  const OfiLibrary& library_;
  std::unique_ptr<OfiDomain> domain_;
  Capabilities capabilities_;
  bool provider_keys_ = false;  // the provider chooses keys (FI_MR_PROV_KEY)
  bool virt_addr_ = false;
  bool raw_keys_ = false;
  // Whether the provider offers FI_HMEM at all: -1 not asked yet, else 0 or 1.
  mutable std::atomic<int> provider_offers_hmem_{-1};
};

}  // namespace hmr::nic::ofi
