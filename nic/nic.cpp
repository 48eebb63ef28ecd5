#include "nic/nic.h"

#include <cstring>

#include "nic/callback/callback_nic.h"
#include "nic/sim/sim_nic.h"
#include "nic/verbs/verbs_nic.h"
#if defined(HMR_HAVE_OFI)
#include "nic/ofi/ofi_nic.h"
#endif

namespace hmr::nic {

Status Nic::refresh(Registration&, std::span<const iovec>) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support refreshing a registration",
                    capabilities().name.c_str());
}

Status Nic::set_remote_access(Registration&, RemoteAccess) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support enabling or binding MRs",
                    capabilities().name.c_str());
}

Status Nic::check_local(void*, const void*, size_t, uint64_t) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not move bytes through hmr endpoints",
                    capabilities().name.c_str());
}

Status Nic::remote_access(const RmaRequest&) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not move bytes through hmr endpoints",
                    capabilities().name.c_str());
}

Status Nic::rereg(Registration&, const ReregRequest&) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support re-registration",
                    capabilities().name.c_str());
}

Result<MemoryWindow> Nic::alloc_window(WindowType) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support memory windows",
                    capabilities().name.c_str());
}

Status Nic::bind_window(MemoryWindow&, const WindowBind&) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support memory windows",
                    capabilities().name.c_str());
}

Status Nic::invalidate_window(MemoryWindow&, void*, uint64_t, bool) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support memory windows",
                    capabilities().name.c_str());
}

Status Nic::dealloc_window(MemoryWindow&) {
  return make_error(HMR_EOPNOTSUPP, "NIC '%s' does not support memory windows",
                    capabilities().name.c_str());
}

Status Nic::advise(const Registration&, Advice, std::span<const iovec>, bool) {
  return make_error(HMR_EOPNOTSUPP,
                    "NIC '%s' does not support prefetch advice (no on-demand paging)",
                    capabilities().name.c_str());
}

Result<std::unique_ptr<Nic>> open_nic(const char* name, const char* options, void* handle) {
  if (name == nullptr || std::strcmp(name, "sim") == 0) {
    if (handle != nullptr) {
      return make_error(HMR_EINVAL, "the sim NIC takes no nic_handle (it has no NIC objects)");
    }
    return sim::SimNic::open(options);
  }
  if (std::strcmp(name, "verbs") == 0) return verbs::VerbsNic::open(options, handle);
  if (std::strcmp(name, "callback") == 0) return callback::CallbackNic::open(options, handle);
  if (std::strcmp(name, "ofi") == 0) {
#if defined(HMR_HAVE_OFI)
    return ofi::OfiNic::open(options, handle);
#else
    return make_error(HMR_ENOSYS, "this hmr was built without libfabric's headers, so it has no "
                      "ofi NIC adapter (install libfabric-dev and rebuild)");
#endif
  }
  return make_error(HMR_ENODEV, "unknown NIC adapter '%s' (this build has: sim, verbs, ofi, callback)",
                    name);
}

}  // namespace hmr::nic
