// hmem::Registry: the memory interfaces of this process, and the one place that answers
// "what is this pointer?".
//
// FI_HMEM (read once per process) picks the enabled interfaces and the detection order.
// The runtimes are loaded lazily, once, thread-safely, on first need (hmr_domain_open, or the
// first query): never on a registration's hit path.  A runtime that fails to load is
// remembered with its reason (describe() shows it), and memory declared as that iface fails
// with that reason.
//
// Fail closed, everywhere: a declared iface/device that detection contradicts is an error
// with the reason; an iface whose runtime is missing never turns device memory into host
// memory; and when a runtime's library is already in the process (the application uses it)
// but hmr cannot initialise it, undeclared pointers cannot be classified and fail, saying
// how to resolve it (fix the runtime, or exclude it with FI_HMEM=^name).
#pragma once

#include <hmr/hmr.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "hmem/iface.h"
#include "hmem/iface_factory.h"
#include "hmem/iface_list.h"
#include "hmem/system_iface.h"
#include "util/status.h"

namespace hmr::hmem {

const char* iface_name(int iface);

// Syntax of a caller-declared iface/device pair: iface in range, device 0 for system memory,
// a non-negative int otherwise, a Level Zero device that decodes.  Not availability.
Status check_device_syntax(int iface, uint64_t device);

// What hmr-info reports for one iface.
struct IfaceReport {
  int iface = HMR_HMEM_SYSTEM;
  std::string name;
  bool enabled = false;   // by FI_HMEM
  bool built = false;     // this hmr build has the iface
  bool loaded = false;    // its runtime is loaded and initialised
  std::string library;    // the library loaded (or that would be: override or default name)
  std::string version;    // the runtime's version, when loaded
  std::string reason;     // why not enabled / not loaded; "" when loaded
  bool resident = false;  // the library was in the process before hmr loaded it
  Iface::FreeTracking free_tracking = Iface::FreeTracking::none;
  bool detects_all = true;
  std::vector<DeviceCapabilities> devices;  // per device, when loaded
};

class Registry {
 public:
  explicit Registry(IfaceSelection selection,
                    std::span<const IfaceDescriptor> descriptors = builtin_ifaces());
  // A registry whose configuration was bad (FI_HMEM did not parse): every call fails with it.
  explicit Registry(Status selection_error);
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry();

  // The process's registry (FI_HMEM read on first use); never destroyed, so runtimes stay
  // loaded until the process ends.
  static Registry& global();

  // Loads every enabled runtime, once; later calls return at once.  Fails only when the
  // configuration is bad; a runtime that fails to load is recorded, not an error here.
  Status load();

  // Detection: asks the loaded device ifaces in detection order; the first that claims the
  // range answers; none claiming it means host memory.  Any failure other than "not mine" is
  // final.  sys_dev is left empty for host memory (see numa_node()).
  Result<PointerInfo> classify(const void* ptr, size_t len) {
    if (!loaded_.load(std::memory_order_acquire)) HMR_RETURN_IF_ERROR(load());
    if (detect_count_ == 0 && unverifiable_.ok()) {
      if (ptr == nullptr || len == 0 || reinterpret_cast<uintptr_t>(ptr) + len <
                                            reinterpret_cast<uintptr_t>(ptr)) {
        return bad_range(ptr, len);
      }
      return host_pointer_info(ptr, len);
    }
    return classify_slow(ptr, len);
  }

  // classify(), with each runtime's identify(): what the device cache's hit path asks.
  // Host memory is iface HMR_HMEM_SYSTEM.  Only the runtimes in `asked` (bit 1 << iface) are
  // asked, in detection order: the hit path asks those whose memory it may find cached, so a
  // hit costs one question to its own runtime whatever else is loaded.  Memory no asked
  // runtime claims reads as host memory, which to that caller means "no hit here".
  static constexpr uint32_t kEveryIface = (1u << HMR_HMEM_IFACE_COUNT) - 1;
  Status identify(const void* ptr, size_t len, AllocationIdentity& out,
                  uint32_t asked = kEveryIface);

  // Verification of a declaration: the declared iface must be loaded and must own the range
  // on the declared device; declared system memory must not be claimed by a device runtime.
  Result<PointerInfo> verify(int iface, uint64_t device, const void* ptr, size_t len);

  // The loaded iface, or why it cannot be used (HMR_ENOSYS: disabled, not built, not loaded).
  Result<Iface*> loaded_iface(int iface);
  // Per-device capabilities, read once when the runtime loaded.
  Result<DeviceCapabilities> capabilities(int iface, DeviceId device);
  bool detects_all(int iface) const;

  const IfaceSelection& selection() const { return selection_; }
  std::vector<IfaceReport> describe();

 private:
  struct Slot {
    const IfaceDescriptor* descriptor = nullptr;
    std::unique_ptr<Iface> iface;  // set once its runtime loaded
    Status status;                 // why it did not
    bool resident = false;
    std::vector<DeviceCapabilities> devices;
  };

  void load_all();
  void load_slot(Slot& slot);
  Result<PointerInfo> classify_slow(const void* ptr, size_t len);
  static Status bad_range(const void* ptr, size_t len);

  Status selection_error_;
  IfaceSelection selection_;
  SystemIface system_;
  std::array<Slot, HMR_HMEM_IFACE_COUNT> slots_;

  std::once_flag once_;
  std::atomic<bool> loaded_{false};
  // Written once inside load_all(), read after loaded_ is seen true.
  std::array<Iface*, HMR_HMEM_IFACE_COUNT> detect_{};
  std::array<uint32_t, HMR_HMEM_IFACE_COUNT> detect_bit_{};  // 1 << detect_[i]->iface()
  int detect_count_ = 0;
  Status unverifiable_;
};

}  // namespace hmr::hmem
