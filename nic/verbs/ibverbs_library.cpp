#include "nic/verbs/ibverbs_library.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "util/log.h"

namespace hmr::verbs {

IbverbsLibrary::IbverbsLibrary(hmem::SymbolTable table) : table_(std::move(table)) {
  bind_ibverbs_symbols(table_, symbols_);
}

Result<std::shared_ptr<const IbverbsLibrary>> IbverbsLibrary::load() {
  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load(kIbverbsVendor, kIbverbsSoname, ibverbs_symbol_specs());
  if (!table.ok()) return table.status();
  return std::shared_ptr<const IbverbsLibrary>(
      std::make_shared<IbverbsLibrary>(std::move(*table)));
}

Result<DeviceList> DeviceList::get(std::shared_ptr<const IbverbsLibrary> library) {
  int count = 0;
  errno = 0;
  ibv_device** devices = library->symbols().get_device_list(&count);
  if (devices == nullptr) {
    const int err = errno;
    return make_error(HMR_ENODEV,
                      "no RDMA devices: ibv_get_device_list failed: %s; this kernel has no RDMA "
                      "support (ib_uverbs) or no RDMA device, or %s cannot reach it; pass an "
                      "ibv_pd as nic_handle or run where ibv_devices lists a device",
                      err != 0 ? std::strerror(err) : "no errno", library->path().c_str());
  }
  DeviceList list(std::move(library), devices, count > 0 ? static_cast<size_t>(count) : 0);
  if (list.size() == 0) {
    return make_error(HMR_ENODEV,
                      "no RDMA devices: ibv_get_device_list returned an empty list (no "
                      "device is bound to an RDMA driver, or its provider library is missing)");
  }
  return list;
}

DeviceList::DeviceList(std::shared_ptr<const IbverbsLibrary> library, ibv_device** devices,
                       size_t count)
    : library_(std::move(library)), devices_(devices), count_(count) {}

DeviceList::DeviceList(DeviceList&& other) noexcept
    : library_(std::move(other.library_)),
      devices_(std::exchange(other.devices_, nullptr)),
      count_(std::exchange(other.count_, 0)) {}

DeviceList::~DeviceList() {
  if (devices_ != nullptr) library_->symbols().free_device_list(devices_);
}

std::string DeviceList::name(size_t index) const {
  const char* name = library_->symbols().get_device_name(devices_[index]);
  return name != nullptr ? name : "";
}

Result<ibv_device*> DeviceList::find(const std::string& name) const {
  std::string known;
  for (size_t i = 0; i < count_; ++i) {
    const std::string candidate = this->name(i);
    if (candidate == name) return devices_[i];
    known += known.empty() ? candidate : ", " + candidate;
  }
  return make_error(HMR_ENODEV, "no RDMA device named '%s' (there are: %s)", name.c_str(),
                    known.c_str());
}

Result<DeviceHandle> DeviceHandle::open(std::shared_ptr<const IbverbsLibrary> library,
                                        ibv_device* device) {
  const char* raw_name = library->symbols().get_device_name(device);
  errno = 0;
  ibv_context* context = library->symbols().open_device(device);
  if (context == nullptr) {
    const int err = errno;
    return make_error(err == EACCES || err == EPERM ? HMR_EACCES : HMR_ENODEV,
                      "ibv_open_device(%s) failed: %s; check the permissions of "
                      "/dev/infiniband/uverbs*",
                      raw_name != nullptr ? raw_name : "?",
                      err != 0 ? std::strerror(err) : "no errno");
  }
  return adopt(std::move(library), context);
}

Result<DeviceHandle> DeviceHandle::adopt(std::shared_ptr<const IbverbsLibrary> library,
                                         ibv_context* context) {
  const IbverbsSymbols& verbs = library->symbols();
  const char* raw_name = verbs.get_device_name(context->device);
  const std::string name = raw_name != nullptr ? raw_name : "?";
  errno = 0;
  ibv_pd* pd = verbs.alloc_pd(context);
  if (pd == nullptr) {
    const int err = errno;
    if (verbs.close_device(context) != 0) {
      log_message(LogLevel::warn, "ibv_close_device(%s) failed after ibv_alloc_pd failed",
                  name.c_str());
    }
    return make_error(err == ENOMEM ? HMR_ENOMEM : HMR_EIO,
                      "ibv_alloc_pd on RDMA device %s failed: %s", name.c_str(),
                      err != 0 ? std::strerror(err) : "no errno");
  }
  return DeviceHandle(std::move(library), context, pd, true);
}

Result<DeviceHandle> DeviceHandle::borrow(std::shared_ptr<const IbverbsLibrary> library,
                                          ibv_pd* pd) {
  if (pd->context == nullptr || pd->context->device == nullptr) {
    return make_error(HMR_EINVAL, "nic_handle %p is not a struct ibv_pd: its context or device "
                      "is NULL", static_cast<void*>(pd));
  }
  return DeviceHandle(std::move(library), pd->context, pd, false);
}

DeviceHandle::DeviceHandle(std::shared_ptr<const IbverbsLibrary> library, ibv_context* context,
                           ibv_pd* pd, bool owned)
    : library_(std::move(library)), context_(context), pd_(pd), owned_(owned) {
  const char* raw_name = library_->symbols().get_device_name(context->device);
  name_ = raw_name != nullptr ? raw_name : "?";
}

DeviceHandle::DeviceHandle(DeviceHandle&& other) noexcept
    : library_(std::move(other.library_)),
      context_(std::exchange(other.context_, nullptr)),
      pd_(std::exchange(other.pd_, nullptr)),
      owned_(std::exchange(other.owned_, false)),
      name_(std::move(other.name_)) {}

DeviceHandle::~DeviceHandle() {
  if (!owned_) return;
  if (const Status status = close(); !status.ok()) {
    log_message(LogLevel::warn, "%s", status.reason().c_str());
  }
}

Status DeviceHandle::close() {
  if (!owned_) return ok_status();
  owned_ = false;
  const IbverbsSymbols& verbs = library_->symbols();
  // ibv_dealloc_pd fails (EBUSY: the kernel's uverbs_free_pd while the PD's usecnt is not 0)
  // while a QP, MR, MW, SRQ or AH of the PD remains.  Not hmr's (they were deregistered before
  // this), so the application's, made through nic_handle.  Closing the context all the same
  // releases them: the kernel destroys every object of the uverbs file as it closes
  // (uverbs_destroy_ufile_hw), so nothing stays pinned; the application's handles to them are
  // dead.
  const int dealloc_err = verbs.dealloc_pd(pd_);
  // rdma-core's ibv_close_device returns 0 whatever happens (its provider's free_context
  // returns nothing); a failure of another library's is logged.
  errno = 0;
  if (verbs.close_device(context_) != 0) {
    log_message(LogLevel::warn, "ibv_close_device(%s) failed: %s", name_.c_str(),
                errno != 0 ? std::strerror(errno) : "no errno");
  }
  pd_ = nullptr;
  context_ = nullptr;
  if (dealloc_err != 0) {
    return make_error(HMR_EIO,
                      "ibv_dealloc_pd(%s) failed: %s%s; the device context was closed all the "
                      "same, which destroyed what was left on the PD",
                      name_.c_str(), std::strerror(dealloc_err),
                      dealloc_err == EBUSY ? ": objects you made on it through nic_handle "
                                             "(QPs, MRs, memory windows) were still there; "
                                             "destroy them before hmr_domain_close"
                                           : "");
  }
  return ok_status();
}

}  // namespace hmr::verbs
