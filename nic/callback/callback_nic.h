// nic = "callback": the application's own NIC code behind hmr's registration path.  hmr keeps
// detection, the export decision, the cache and its monitors; each NIC registration and
// deregistration is a call to the application's struct hmr_nic_callbacks.
#pragma once

#include <hmr/hmr.h>

#include <memory>

#include "nic/nic.h"

namespace hmr::nic::callback {

class CallbackNic final : public Nic {
 public:
  // `handle` is the application's struct hmr_nic_callbacks; checked and copied here.
  static Result<std::unique_ptr<Nic>> open(const char* options, void* handle);

  const Capabilities& capabilities() const override { return capabilities_; }
  Result<Registration> register_memory(const RegistrationRequest& request) override;
  Status deregister(Registration& registration) override;
  void* native_handle() const override { return user_handle_; }
  // The optional callbacks; without them -HMR_ENOSYS with the reason.
  Status rereg(Registration& registration, const ReregRequest& request) override;
  Status advise(const Registration& registration, Advice advice, std::span<const iovec> ranges,
                bool flush) override;
  // The callback's contract: after a failed rereg, hmr only deregisters the registration.
  bool usable_after_failed_rereg(const Registration&) const override { return false; }

 private:
  // What Registration::handle points to: the application's own handle (hmr_nic_mr.handle),
  // which need not be unique or non-null, in a record of hmr's, so that every live
  // registration has a handle of its own (the device cache keys what it holds by it:
  // registration/device_registration.h).  Made at register_memory, freed at deregister.
  struct CallbackRegistration {
    void* handle;
    // Whether peers address it by VA (else from 0).  Kept here, not read off a base of 0: a
    // zero-byte MR at NULL is VA-addressed too, and a rereg must move its base.
    bool virt_addr;
  };
  static hmr_nic_mr as_callback_mr(const Registration& registration);
  CallbackNic(const hmr_nic_callbacks& callbacks, void* user_handle);

  hmr_nic_callbacks callbacks_;
  void* user_handle_;
  Capabilities capabilities_;
};

}  // namespace hmr::nic::callback
