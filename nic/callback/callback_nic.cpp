#include "nic/callback/callback_nic.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace hmr::nic::callback {
namespace {

constexpr uint64_t kKnownCaps =
    HMR_NIC_CB_DMABUF | HMR_NIC_CB_PEER_DIRECT | HMR_NIC_CB_ODP | HMR_NIC_CB_IMPLICIT_ODP |
    HMR_NIC_CB_PINS_HOST_MEMORY;
// The struct as first published (through dereg): callers built against it stay valid.
constexpr size_t kFirstVersionSize = offsetof(hmr_nic_callbacks, dereg) + sizeof(void*);
constexpr size_t kReasonSize = 256;

// A callback's answer as hmr's: its code and its reason, or a complaint about the answer.
Status callback_status(int rc, const char* call, const char* reason) {
  if (rc == 0) return ok_status();
  if (rc > 0) {
    return make_error(HMR_EIO, "callback NIC: %s returned %d, which is neither 0 nor a negative "
                      "HMR_E* code%s%s", call, rc, reason[0] != '\0' ? ": " : "", reason);
  }
  return make_error(-rc, "callback NIC: %s failed (%s): %s", call, hmr_strerror(-rc),
                    reason[0] != '\0' ? reason : "the callback gave no reason");
}

}  // namespace

Result<std::unique_ptr<Nic>> CallbackNic::open(const char* options, void* handle) {
  if (options != nullptr && options[0] != '\0') {
    return make_error(HMR_EINVAL, "the callback NIC takes no nic_options (its settings are in "
                      "struct hmr_nic_callbacks)");
  }
  const auto* user = static_cast<const hmr_nic_callbacks*>(handle);
  if (user == nullptr) {
    return make_error(HMR_EINVAL, "nic \"callback\" needs nic_handle = a struct "
                      "hmr_nic_callbacks *");
  }
  // A size no struct of this ABI will reach is garbage, not a newer caller: refused rather
  // than read that far past the caller's struct (the C ABI's other structs are bounded so).
  constexpr size_t kLargestPlausible = 4096;
  if (user->size < kFirstVersionSize || user->size > kLargestPlausible) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks.size is %zu; set it to sizeof(struct "
                      "hmr_nic_callbacks) (%zu)", user->size, sizeof(hmr_nic_callbacks));
  }
  const auto* bytes = static_cast<const unsigned char*>(handle);
  for (size_t i = sizeof(hmr_nic_callbacks); i < user->size; ++i) {
    if (bytes[i] != 0) {
      return make_error(HMR_EINVAL, "hmr_nic_callbacks.size is %zu but this hmr knows %zu bytes "
                        "and byte %zu is set: the caller needs a newer hmr", user->size,
                        sizeof(hmr_nic_callbacks), i);
    }
  }
  hmr_nic_callbacks callbacks{};  // members the caller's struct lacks stay NULL
  std::memcpy(&callbacks, user, std::min(user->size, sizeof callbacks));
  if (callbacks.reg_va == nullptr || callbacks.dereg == nullptr) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks needs reg_va and dereg");
  }
  if (callbacks.key_size == 0 || callbacks.key_size > sizeof(uint64_t)) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks.key_size %zu outside 1..8",
                      callbacks.key_size);
  }
  if (callbacks.caps & ~kKnownCaps) {
    return make_error(HMR_EBADFLAGS, "hmr_nic_callbacks.caps has unknown bits %#llx",
                      static_cast<unsigned long long>(callbacks.caps & ~kKnownCaps));
  }
  if ((callbacks.caps & HMR_NIC_CB_IMPLICIT_ODP) && !(callbacks.caps & HMR_NIC_CB_ODP)) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks: HMR_NIC_CB_IMPLICIT_ODP needs "
                      "HMR_NIC_CB_ODP");
  }
  if (callbacks.advise != nullptr && !(callbacks.caps & HMR_NIC_CB_ODP)) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks: advise prefetches ODP registrations; set "
                      "HMR_NIC_CB_ODP too");
  }
  if (((callbacks.caps & HMR_NIC_CB_DMABUF) != 0) != (callbacks.reg_dmabuf != nullptr)) {
    return make_error(HMR_EINVAL, "hmr_nic_callbacks: HMR_NIC_CB_DMABUF and reg_dmabuf go "
                      "together (one is set without the other)");
  }
  return std::unique_ptr<Nic>(new CallbackNic(callbacks, handle));
}

CallbackNic::CallbackNic(const hmr_nic_callbacks& callbacks, void* user_handle)
    : callbacks_(callbacks), user_handle_(user_handle) {
  capabilities_.name = "callback";
  capabilities_.runs_application_code = true;  // every call is one of the application's
  capabilities_.required_mr_mode = callbacks.required_mr_mode;
  capabilities_.key_size = callbacks.key_size;
  capabilities_.iov_limit = 1;  // one range per callback
  capabilities_.mr_cnt = callbacks.mr_cnt;
  capabilities_.max_mr_size = callbacks.max_mr_size != 0 ? callbacks.max_mr_size : UINT64_MAX;
  capabilities_.dmabuf_import = (callbacks.caps & HMR_NIC_CB_DMABUF) != 0;
  capabilities_.peer_direct = (callbacks.caps & HMR_NIC_CB_PEER_DIRECT) != 0;
  capabilities_.pins_host_memory = (callbacks.caps & HMR_NIC_CB_PINS_HOST_MEMORY) != 0;
  // What the application's NIC does beyond registration is what its optional callbacks and
  // caps say; the rest is done on its own objects.
  const auto lacks = [](const char* what) {
    return Support{false, std::string("the callback NIC has ") + what};
  };
  const bool odp = (callbacks.caps & HMR_NIC_CB_ODP) != 0;
  MemoryOperations& ops = capabilities_.operations;
  ops.rereg = callbacks.rereg != nullptr ? Support{true, ""}
                                         : lacks("no re-registration (hmr_nic_callbacks.rereg is NULL)");
  ops.memory_windows = lacks("no memory windows: create them on your own NIC objects");
  ops.odp = odp ? Support{true, ""}
                : lacks("no on-demand-paging registrations (caps lacks HMR_NIC_CB_ODP)");
  ops.implicit_odp = (callbacks.caps & HMR_NIC_CB_IMPLICIT_ODP) != 0
                         ? Support{true, ""}
                         : lacks("no implicit on-demand paging (caps lacks "
                                 "HMR_NIC_CB_IMPLICIT_ODP)");
  ops.advise = callbacks.advise != nullptr
                   ? Support{true, ""}
                   : lacks("no prefetch advice (hmr_nic_callbacks.advise is NULL)");
  ops.indirect = lacks("no indirect keys: build them on your own NIC objects");
}

Result<Registration> CallbackNic::register_memory(const RegistrationRequest& request) {
  if (request.flags & HMR_RMA_EVENT) {
    // As on the ofi NIC: the events happen on the application's NIC, which tells hmr of none,
    // so no hmr counter could ever count them (binding one would fail).
    return make_error(HMR_EOPNOTSUPP, "callback NIC: HMR_RMA_EVENT needs counters of remote "
                      "events, and the application's NIC reports none to hmr; register "
                      "without it");
  }
  hmr_nic_reg_request call{};
  call.access = request.access;
  call.iface = request.iface;
  call.device = request.device;
  call.dmabuf_fd = -1;
  if (request.requested_key) {
    call.has_requested_key = 1;
    call.requested_key = *request.requested_key;
  }
  call.on_demand_paging = request.on_demand_paging ? 1 : 0;
  if (request.dmabuf != nullptr) {
    call.addr = request.dmabuf->base_addr;
    call.len = request.dmabuf->len;
    call.dmabuf_fd = request.dmabuf->fd;
    call.dmabuf_offset = request.dmabuf->offset;
  } else if (request.segments.size() == 1) {
    call.addr = request.segments[0].iov_base;
    call.len = request.segments[0].iov_len;
  } else {
    return make_error(HMR_EINVAL, "callback NIC registers one range at a time, not %zu",
                      request.segments.size());
  }
  hmr_nic_mr mr{};
  char reason[kReasonSize] = {};
  const bool dmabuf = request.dmabuf != nullptr;
  const char* const call_name = dmabuf ? "reg_dmabuf" : "reg_va";
  const int rc = (dmabuf ? callbacks_.reg_dmabuf : callbacks_.reg_va)(callbacks_.context, &call,
                                                                       &mr, reason, sizeof reason);
  reason[kReasonSize - 1] = '\0';  // whatever the callback wrote
  HMR_RETURN_IF_ERROR(callback_status(rc, call_name, reason));
  // A key hmr cannot hand out as it came: the registration exists on the NIC but cannot be
  // described, so it goes straight back.
  const bool too_wide =
      callbacks_.key_size < sizeof(uint64_t) && (mr.key >> (8 * callbacks_.key_size)) != 0;
  const bool not_asked = request.requested_key && mr.key != *request.requested_key;
  if (too_wide || not_asked) {
    // Deregistered before the reason is built: building it allocates, and out of memory there
    // left the registration at the NIC.
    char ignored[kReasonSize] = {};
    callbacks_.dereg(callbacks_.context, &mr, ignored, sizeof ignored);
    if (too_wide) {
      return make_error(HMR_EINVAL, "callback NIC: %s returned key %#llx, wider than key_size %zu",
                        call_name, static_cast<unsigned long long>(mr.key), callbacks_.key_size);
    }
    return make_error(HMR_EINVAL, "callback NIC: the application asked for key %#llx and %s "
                      "returned %#llx", static_cast<unsigned long long>(*request.requested_key),
                      call_name, static_cast<unsigned long long>(mr.key));
  }
  auto* record = new (std::nothrow) CallbackRegistration{mr.handle, request.virt_addr};
  if (record == nullptr) {
    char ignored[kReasonSize] = {};
    callbacks_.dereg(callbacks_.context, &mr, ignored, sizeof ignored);
    return make_error(HMR_ENOMEM, "callback NIC: no memory for the registration's record");
  }
  Registration registration;
  registration.handle = record;
  registration.desc = mr.desc;
  registration.key = KeyBytes::from_u64(mr.key, callbacks_.key_size);
  registration.base_addr = request.virt_addr ? reinterpret_cast<uint64_t>(call.addr) : 0;
  return registration;
}

Status CallbackNic::deregister(Registration& registration) {
  hmr_nic_mr mr = as_callback_mr(registration);
  char reason[kReasonSize] = {};
  const int rc = callbacks_.dereg(callbacks_.context, &mr, reason, sizeof reason);
  reason[kReasonSize - 1] = '\0';
  // The record goes whatever dereg said: hmr drops a registration whose deregistration failed
  // (NicRegistrar::deregister_memory) and never asks again.
  delete static_cast<CallbackRegistration*>(registration.handle);
  registration = Registration();
  return callback_status(rc, "dereg", reason);
}

hmr_nic_mr CallbackNic::as_callback_mr(const Registration& registration) {
  hmr_nic_mr mr{};
  mr.handle = static_cast<const CallbackRegistration*>(registration.handle)->handle;
  mr.desc = registration.desc;
  mr.key = registration.key.low_u64();
  return mr;
}

Status CallbackNic::rereg(Registration& registration, const ReregRequest& request) {
  if (callbacks_.rereg == nullptr) {
    return make_error(HMR_ENOSYS, "%s", capabilities_.operations.rereg.reason.c_str());
  }
  hmr_nic_rereg_request call{};
  if (!request.translation.empty()) {
    if (request.translation.size() != 1) {
      return make_error(HMR_EINVAL, "callback NIC re-registers one range, not %zu",
                        request.translation.size());
    }
    call.addr = request.translation[0].iov_base;
    call.len = request.translation[0].iov_len;
  }
  if (request.access) {
    call.has_access = 1;
    call.access = *request.access;
  }
  call.nic_pd = request.protection_domain;
  hmr_nic_mr mr = as_callback_mr(registration);
  char reason[kReasonSize] = {};
  const int rc = callbacks_.rereg(callbacks_.context, &mr, &call, reason, sizeof reason);
  reason[kReasonSize - 1] = '\0';
  HMR_RETURN_IF_ERROR(callback_status(rc, "rereg", reason));
  // What the callback wrote is what dereg must get back, whether or not hmr takes the key
  // (every copy of the registration shares the record).
  static_cast<CallbackRegistration*>(registration.handle)->handle = mr.handle;
  registration.desc = mr.desc;
  if (callbacks_.key_size < sizeof(uint64_t) && (mr.key >> (8 * callbacks_.key_size)) != 0) {
    return make_error(HMR_EIO, "callback NIC: rereg returned key %#llx, wider than key_size %zu",
                      static_cast<unsigned long long>(mr.key), callbacks_.key_size);
  }
  registration.key = KeyBytes::from_u64(mr.key, callbacks_.key_size);
  if (!request.translation.empty() &&
      static_cast<const CallbackRegistration*>(registration.handle)->virt_addr) {
    registration.base_addr = reinterpret_cast<uint64_t>(call.addr);
  }
  return ok_status();
}

Status CallbackNic::advise(const Registration& registration, Advice advice,
                           std::span<const iovec> ranges, bool) {
  if (callbacks_.advise == nullptr) {
    return make_error(HMR_ENOSYS, "%s", capabilities_.operations.advise.reason.c_str());
  }
  const hmr_nic_mr mr = as_callback_mr(registration);
  for (const iovec& range : ranges) {
    char reason[kReasonSize] = {};
    const int rc = callbacks_.advise(callbacks_.context, &mr, range.iov_base, range.iov_len,
                                     advice == Advice::prefetch_write ? 1 : 0, reason,
                                     sizeof reason);
    reason[kReasonSize - 1] = '\0';
    HMR_RETURN_IF_ERROR(callback_status(rc, "advise", reason));
  }
  return ok_status();
}

}  // namespace hmr::nic::callback
