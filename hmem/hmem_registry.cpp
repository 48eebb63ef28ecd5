#include "hmem/hmem_registry.h"

#include <dlfcn.h>

#include "hmem/symbol_table.h"
#include "hmem/ze_device.h"
#include "util/environment.h"
#include "util/log.h"

namespace hmr::hmem {
namespace {

using ull = unsigned long long;

// Whether the application already has `library` loaded (never loads it).
bool library_resident(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

Capability failed_capability(const Status& status) { return Capability::no(status.reason()); }

}  // namespace

const char* iface_name(int iface) {
  switch (iface) {
    case HMR_HMEM_SYSTEM: return "system";
    case HMR_HMEM_CUDA: return "cuda";
    case HMR_HMEM_ROCR: return "rocr";
    case HMR_HMEM_ZE: return "ze";
    case HMR_HMEM_NEURON: return "neuron";
    case HMR_HMEM_SYNAPSEAI: return "synapseai";
  }
  return "unknown";
}

Status check_device_syntax(int iface, uint64_t device) {
  const auto as_int = static_cast<int>(static_cast<uint32_t>(device));
  if (iface < 0 || iface >= HMR_HMEM_IFACE_COUNT) {
    return make_error(HMR_EINVAL, "iface %d is not an hmr_hmem_iface (0..%d)", iface,
                      HMR_HMEM_IFACE_COUNT - 1);
  }
  if (iface == HMR_HMEM_SYSTEM) {
    if (device != 0) {
      return make_error(HMR_EINVAL, "device must be 0 for system memory (got %llu)",
                        static_cast<ull>(device));
    }
    return ok_status();
  }
  if (device > UINT32_MAX || as_int < 0) {
    return make_error(HMR_EINVAL, "%s device %lld is negative or out of range", iface_name(iface),
                      static_cast<long long>(as_int));
  }
  if (iface == HMR_HMEM_ZE) {
    Result<ZeDeviceIndex> decoded = decode_ze_device(as_int);
    if (!decoded.ok()) return decoded.status();
  }
  return ok_status();
}

Registry::Registry(IfaceSelection selection, std::span<const IfaceDescriptor> descriptors)
    : selection_(std::move(selection)) {
  for (const IfaceDescriptor& descriptor : descriptors) {
    if (descriptor.iface > HMR_HMEM_SYSTEM && descriptor.iface < HMR_HMEM_IFACE_COUNT) {
      slots_[static_cast<size_t>(descriptor.iface)].descriptor = &descriptor;
    }
  }
}

Registry::Registry(Status selection_error) : selection_error_(std::move(selection_error)) {}

Registry::~Registry() = default;

Registry& Registry::global() {
  static Registry* registry = [] {
    Result<IfaceSelection> selection = read_hmem_selection();
    return selection.ok() ? new Registry(std::move(*selection)) : new Registry(selection.status());
  }();
  return *registry;
}

Status Registry::load() {
  if (!selection_error_.ok()) return selection_error_;
  std::call_once(once_, [this] { load_all(); });
  return ok_status();
}

void Registry::load_slot(Slot& slot) {
  const IfaceDescriptor& descriptor = *slot.descriptor;
  const char* name = iface_name(descriptor.iface);
  if (descriptor.make == nullptr) {
    slot.status = Status(HMR_ENOSYS, std::string("this hmr build has no ") + name + " interface");
    return;
  }
  slot.resident =
      library_resident(resolve_library_path(descriptor.vendor, descriptor.default_library));
  std::unique_ptr<Iface> iface = descriptor.make();
  Status status = iface->init();
  if (!status.ok()) {
    slot.status = status;
    log_message(slot.resident ? LogLevel::warn : LogLevel::info, "%s memory interface not loaded: %s",
                name, status.reason().c_str());
    return;
  }
  // Level Zero's ids are encoded (driver << 16 | device), so ask for the ids, not a count.
  Result<std::vector<DeviceId>> ids = iface->device_ids();
  for (size_t i = 0; ids.ok() && i < ids->size(); ++i) {
    const DeviceId id = (*ids)[i];
    Result<DeviceCapabilities> caps = iface->capabilities(id);
    if (caps.ok()) {
      slot.devices.push_back(std::move(*caps));
    } else {
      slot.devices.push_back(DeviceCapabilities{id, failed_capability(caps.status()),
                                                failed_capability(caps.status()),
                                                failed_capability(caps.status())});
    }
  }
  slot.iface = std::move(iface);
  log_message(LogLevel::info, "%s memory interface loaded from '%s' (%s), %zu device(s)", name,
              slot.iface->library_path().c_str(), slot.iface->runtime_version().c_str(),
              slot.devices.size());
}

void Registry::load_all() {
  for (int iface : selection_.detection_order) {
    Slot& slot = slots_[static_cast<size_t>(iface)];
    if (slot.descriptor == nullptr) {
      slot.status = Status(HMR_ENOSYS, std::string("this hmr build has no ") + iface_name(iface) +
                                           " interface");
      continue;
    }
    load_slot(slot);
    if (slot.iface) {
      detect_bit_[static_cast<size_t>(detect_count_)] = 1u << iface;
      detect_[static_cast<size_t>(detect_count_++)] = slot.iface.get();
    } else if (slot.resident && slot.descriptor->detects_all &&
               slot.status.code() != HMR_ENODEV && unverifiable_.ok()) {
      // The application has this runtime loaded, so it may hold memory of it that hmr cannot
      // recognise: calling such a pointer "host memory" would be a guess.  Not so when the
      // runtime's init said it has no device or driver: the application's init of the same
      // library in the same process meets the same, and no memory of it can exist (a Level
      // Zero loader that SYCL frameworks load on hosts without an Intel GPU); nor for a runtime whose
      // iface recognises only the memory hmr allocated (Neuron, SynapseAI: declared memory
      // is checked when it is registered, and its failed init takes no recognition away).
      unverifiable_ = make_error(
          HMR_ENOSYS,
          "the %s runtime is loaded in this process but hmr could not initialise it (%s), so "
          "hmr cannot tell %s memory from host memory; fix the runtime (or point "
          "HMR_%s_LIBRARY at the one the application uses), or set FI_HMEM=^%s if this "
          "process registers no %s memory",
          iface_name(iface), slot.status.reason().c_str(), iface_name(iface),
          slot.descriptor->vendor, iface_name(iface), iface_name(iface));
    }
  }
  loaded_.store(true, std::memory_order_release);
}

Status Registry::bad_range(const void* ptr, size_t len) {
  return make_error(HMR_EINVAL, "memory query of [%p, +%zu): NULL, empty or wrapping range", ptr,
                    len);
}

Result<PointerInfo> Registry::classify_slow(const void* ptr, size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || len == 0 || start + len < start) return bad_range(ptr, len);
  if (!unverifiable_.ok()) return unverifiable_;
  for (int i = 0; i < detect_count_; ++i) {
    Result<PointerInfo> info = detect_[static_cast<size_t>(i)]->query(ptr, len);
    if (info.ok()) return info;
    if (info.status().code() != HMR_ENOENT) return info.status();  // fail closed
  }
  return host_pointer_info(ptr, len);
}

Status Registry::identify(const void* ptr, size_t len, AllocationIdentity& out,
                          uint32_t asked) {
  if (!loaded_.load(std::memory_order_acquire)) HMR_RETURN_IF_ERROR(load());
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || len == 0 || start + len < start) return bad_range(ptr, len);
  if (!unverifiable_.ok()) return unverifiable_;
  for (int i = 0; i < detect_count_; ++i) {
    if ((detect_bit_[static_cast<size_t>(i)] & asked) == 0) continue;
    Status found = detect_[static_cast<size_t>(i)]->identify(ptr, len, out);
    if (found.ok() || found.code() != HMR_ENOENT) return found;  // (a failure: fail closed)
  }
  out = AllocationIdentity{};
  return ok_status();
}

Result<Iface*> Registry::loaded_iface(int iface) {
  HMR_RETURN_IF_ERROR(load());
  if (iface < 0 || iface >= HMR_HMEM_IFACE_COUNT) {
    return make_error(HMR_EINVAL, "iface %d is not an hmr_hmem_iface (0..%d)", iface,
                      HMR_HMEM_IFACE_COUNT - 1);
  }
  if (iface == HMR_HMEM_SYSTEM) return static_cast<Iface*>(&system_);
  if (!selection_.is_enabled(iface)) {
    return make_error(HMR_ENOSYS, "the %s memory interface is disabled by FI_HMEM='%s'",
                      iface_name(iface), selection_.text.c_str());
  }
  const Slot& slot = slots_[static_cast<size_t>(iface)];
  if (!slot.iface) {
    return make_error(HMR_ENOSYS, "the %s memory interface is unavailable: %s", iface_name(iface),
                      slot.status.reason().c_str());
  }
  return slot.iface.get();
}

Result<DeviceCapabilities> Registry::capabilities(int iface, DeviceId device) {
  Result<Iface*> runtime = loaded_iface(iface);
  if (!runtime.ok()) return runtime.status();
  if (iface == HMR_HMEM_SYSTEM) return system_.capabilities(device);
  const Slot& slot = slots_[static_cast<size_t>(iface)];
  for (const DeviceCapabilities& caps : slot.devices) {
    if (caps.device == device) return caps;
  }
  return make_error(HMR_ENODEV, "%s device %llu does not exist (this process sees %zu)",
                    iface_name(iface), static_cast<ull>(device.value), slot.devices.size());
}

bool Registry::detects_all(int iface) const {
  if (iface <= HMR_HMEM_SYSTEM || iface >= HMR_HMEM_IFACE_COUNT) return true;
  const Slot& slot = slots_[static_cast<size_t>(iface)];
  return slot.descriptor == nullptr || slot.descriptor->detects_all;
}

Result<PointerInfo> Registry::verify(int iface, uint64_t device, const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_device_syntax(iface, device));
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || len == 0 || start + len < start) return bad_range(ptr, len);
  if (iface == HMR_HMEM_SYSTEM) {
    Result<PointerInfo> found = classify(ptr, len);
    // A runtime's pinned host memory (cudaHostAlloc, hipHostMalloc) is host memory: libfabric
    // users register their staging buffers as FI_HMEM_SYSTEM, and it is registered by address
    // as detection would have it (it was refused as a contradiction).  Device and managed
    // memory are not: the CPU's view of them is not what the NIC would reach.
    if (!found.ok() || found->iface == HMR_HMEM_SYSTEM || found->kind == MemoryKind::host_alloc) {
      return found;
    }
    return make_error(HMR_EINVAL,
                      "[%p, +%zu) is declared system memory, but the %s runtime reports %s memory "
                      "of device %llu there",
                      ptr, len, iface_name(found->iface), memory_kind_name(found->kind),
                      static_cast<ull>(found->device.value));
  }

  Result<Iface*> runtime = loaded_iface(iface);
  if (!runtime.ok()) {
    return Status(runtime.status().code(),
                  "memory declared as " + std::string(iface_name(iface)) +
                      " memory cannot be registered (never treated as host memory): " +
                      runtime.status().reason());
  }
  Result<PointerInfo> found = (*runtime)->query(ptr, len);
  if (!found.ok()) {
    if (found.status().code() != HMR_ENOENT) return found.status();
    if (!detects_all(iface)) {
      // The runtime cannot be asked; the declaration is all there is.
      PointerInfo declared;
      declared.iface = iface;
      declared.device = DeviceId{device};
      declared.base = start;
      declared.alloc_len = len;
      declared.kind = MemoryKind::device_only;
      return declared;
    }
    Result<PointerInfo> actual = classify(ptr, len);
    return make_error(HMR_EINVAL,
                      "[%p, +%zu) is declared %s memory of device %llu, but the %s runtime does "
                      "not know it (detection finds %s memory there)",
                      ptr, len, iface_name(iface), static_cast<ull>(device), iface_name(iface),
                      actual.ok() ? iface_name(actual->iface) : "no");
  }
  // Pinned host memory from the runtime (cuMemHostAlloc, cuMemHostRegister) is reachable from
  // every device (portable, or under unified addressing); the ordinal it reports is only the
  // device it was allocated or registered against (cuda.h, DEVICE_ORDINAL), so a declaration
  // of another device is no contradiction (one staging pool shared by several GPUs).
  if (found->device.value != device && found->kind != MemoryKind::host_alloc) {
    return make_error(HMR_EINVAL,
                      "[%p, +%zu) is declared %s device %llu memory, but it is on %s device %llu",
                      ptr, len, iface_name(iface), static_cast<ull>(device), iface_name(iface),
                      static_cast<ull>(found->device.value));
  }
  return found;
}

std::vector<IfaceReport> Registry::describe() {
  std::vector<IfaceReport> reports;
  const Status loaded = load();
  for (int iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    IfaceReport report;
    report.iface = iface;
    report.name = iface_name(iface);
    if (iface == HMR_HMEM_SYSTEM) {
      report.enabled = report.built = report.loaded = true;
      report.version = system_.runtime_version();
      Result<DeviceCapabilities> caps = system_.capabilities(DeviceId{0});
      if (caps.ok()) report.devices.push_back(*caps);
      reports.push_back(std::move(report));
      continue;
    }
    const Slot& slot = slots_[static_cast<size_t>(iface)];
    report.enabled = loaded.ok() && selection_.is_enabled(iface);
    report.built = slot.descriptor != nullptr && slot.descriptor->make != nullptr;
    report.detects_all = detects_all(iface);
    if (slot.descriptor != nullptr) {
      report.library = resolve_library_path(slot.descriptor->vendor,
                                            slot.descriptor->default_library);
    }
    if (!loaded.ok()) {
      report.reason = loaded.reason();
    } else if (!report.enabled) {
      report.reason = "disabled by FI_HMEM='" + selection_.text + "'";
    } else if (!slot.iface) {
      report.reason = slot.status.reason();
      report.resident = slot.resident;
    } else {
      report.loaded = true;
      report.resident = slot.resident;
      report.library = slot.iface->library_path();
      report.version = slot.iface->runtime_version();
      report.free_tracking = slot.iface->free_tracking();
      report.devices = slot.devices;
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace hmr::hmem
