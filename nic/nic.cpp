#include "nic/nic.h"

#include <cstring>

#include "hmem/page_range.h"

#include "nic/callback/callback_nic.h"
#include "nic/sim/sim_nic.h"
#include "nic/verbs/verbs_nic.h"
#if defined(HMR_HAVE_OFI)
#include "nic/ofi/ofi_nic.h"
#endif

namespace hmr::nic {

uint64_t pinned_bytes_of(std::span<const iovec> segments) {
  static const size_t page = hmem::host_page_size();
  uint64_t bytes = 0;
  for (const iovec& segment : segments) {
    if (segment.iov_len == 0) continue;  // (no page: the kernel pins none)
    bytes += hmem::page_round(reinterpret_cast<uintptr_t>(segment.iov_base), segment.iov_len,
                              page).length;
  }
  return bytes;
}

uint64_t pinned_bytes_of(const RegistrationRequest& request) {
  if (request.dmabuf != nullptr || request.on_demand_paging ||
      (request.flags & HMR_HMEM_DEVICE_ONLY) != 0) {
    return 0;
  }
  return pinned_bytes_of(request.segments);
}

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

// The optional operations a NIC lacks: -HMR_ENOSYS with the reason the adapter gave.
namespace {
Status lacking(const Support& support, const char* fallback) {
  return make_error(HMR_ENOSYS, "%s", support.reason.empty() ? fallback : support.reason.c_str());
}
}  // namespace

Support unsupported(const std::string& nic_name, const char* what) {
  return Support{false, "the " + nic_name + " NIC " + what};
}

Status Nic::rereg(Registration&, const ReregRequest&) {
  return lacking(capabilities().operations.rereg, "the NIC cannot re-register");
}

Result<MemoryWindow> Nic::alloc_window(WindowType) {
  return lacking(capabilities().operations.memory_windows, "the NIC has no memory windows");
}

Status Nic::bind_window(MemoryWindow&, const WindowBind&) {
  return lacking(capabilities().operations.memory_windows, "the NIC has no memory windows");
}

Status Nic::invalidate_window(MemoryWindow&, void*, uint64_t, bool) {
  return lacking(capabilities().operations.memory_windows, "the NIC has no memory windows");
}

Status Nic::dealloc_window(MemoryWindow&) {
  return lacking(capabilities().operations.memory_windows, "the NIC has no memory windows");
}

Status Nic::advise(const Registration&, Advice, std::span<const iovec>, bool) {
  return lacking(capabilities().operations.advise,
                 "the NIC has no prefetch advice (no on-demand paging)");
}

Result<Registration> Nic::register_indirect(std::span<const IndirectSegment>, uint64_t) {
  return lacking(capabilities().operations.indirect, "the NIC has no indirect keys");
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
