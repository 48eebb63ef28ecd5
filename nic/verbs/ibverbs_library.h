// libibverbs loaded once per adapter, and the RAII owners of what hmr opens with it: the device
// list, a device context and a protection domain.  The application's own context and PD (passed
// as nic_handle) are borrowed, never closed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hmem/symbol_table.h"
#include "nic/verbs/verbs_symbols.h"
#include "util/status.h"

namespace hmr::verbs {

class IbverbsLibrary {
 public:
  // dlopen's libibverbs.so.1 (or HMR_IBVERBS_LIBRARY) and resolves the symbols.
  static Result<std::shared_ptr<const IbverbsLibrary>> load();

  const IbverbsSymbols& symbols() const { return symbols_; }
  const std::string& path() const { return table_.path(); }

  explicit IbverbsLibrary(hmem::SymbolTable table);

 private:
  hmem::SymbolTable table_;
  IbverbsSymbols symbols_;
};

// The device list, freed once.  Getting it fails with a reason when libibverbs returns null
// (no RDMA support: ENOSYS on a kernel without ib_uverbs) or an empty list.
class DeviceList {
 public:
  static Result<DeviceList> get(std::shared_ptr<const IbverbsLibrary> library);
  DeviceList(DeviceList&& other) noexcept;
  DeviceList& operator=(DeviceList&&) = delete;
  DeviceList(const DeviceList&) = delete;
  ~DeviceList();

  size_t size() const { return count_; }
  ibv_device* device(size_t index) const { return devices_[index]; }
  std::string name(size_t index) const;
  // The device named `name`; HMR_ENODEV naming the devices there are when none is.
  Result<ibv_device*> find(const std::string& name) const;

 private:
  DeviceList(std::shared_ptr<const IbverbsLibrary> library, ibv_device** devices, size_t count);

  std::shared_ptr<const IbverbsLibrary> library_;
  ibv_device** devices_ = nullptr;
  size_t count_ = 0;
};

// A context and protection domain: opened here (owned) or the application's (borrowed).
class DeviceHandle {
 public:
  // Opens `device` and allocates a PD in it; both are released by the destructor.
  static Result<DeviceHandle> open(std::shared_ptr<const IbverbsLibrary> library,
                                   ibv_device* device);
  // Takes a context opened another way (mlx5dv_open_device) and allocates a PD in it; owns
  // both, as open() does.  Closes the context when the PD cannot be allocated.
  static Result<DeviceHandle> adopt(std::shared_ptr<const IbverbsLibrary> library,
                                    ibv_context* context);
  // Works in the application's PD; nothing is released.
  static Result<DeviceHandle> borrow(std::shared_ptr<const IbverbsLibrary> library, ibv_pd* pd);

  DeviceHandle(DeviceHandle&& other) noexcept;
  DeviceHandle& operator=(DeviceHandle&&) = delete;
  DeviceHandle(const DeviceHandle&) = delete;
  // Closes what close() has not.
  ~DeviceHandle();

  // Deallocates the PD and closes the context, where they are ours; nothing to do for a
  // borrowed PD.  HMR_EIO when the PD could not be deallocated (EBUSY: objects the
  // application made on it, QPs or MRs, were still there): the context is closed all the
  // same, and the kernel destroys what was left on it with it.  Once only.
  Status close();

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  bool owned() const { return owned_; }
  const std::string& name() const { return name_; }

 private:
  DeviceHandle(std::shared_ptr<const IbverbsLibrary> library, ibv_context* context, ibv_pd* pd,
               bool owned);

  std::shared_ptr<const IbverbsLibrary> library_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  bool owned_ = false;
  std::string name_;
};

}  // namespace hmr::verbs
