// The software NIC's memory operations beyond registration, modelled on verbs: re-registration
// in place, memory windows of type 1 and 2, prefetch advice for on-demand paging, and indirect
// keys over pieces of other registrations (mlx5's UMR with a KLM list).  Windows and indirect
// keys are SimRegions of their own kind in the same table as registrations, so the one RMA path
// (SimNic::remote_access) enforces their range and access exactly as a registration's.
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "nic/sim/sim_nic.h"

namespace hmr::nic::sim {
namespace {

using ull = unsigned long long;

constexpr uint64_t kPageSize = 4096;
constexpr uint64_t kWindowAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

uintptr_t address_of(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

// What a window handle holds: its type and the region of its current binding, if any.
struct SimWindow {
  WindowType type = WindowType::type1;
  SimRegion* bound = nullptr;  // in the table while bound
};

// Maps the pages of [start, start + len) now, as an ODP NIC's prefetch would: the kernel
// populates them (writable for a write prefetch) without the CPU reading or writing a byte.
Status populate(uintptr_t start, uint64_t len, bool for_write) {
  const uintptr_t first = start & ~(kPageSize - 1);
  const uint64_t span = len + (start - first);
  if (madvise(reinterpret_cast<void*>(first), span,
              for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) {
    return ok_status();
  }
  const int err = errno;
  return make_error(err == ENOMEM ? HMR_EFAULT : HMR_EIO,
                    "sim NIC could not prefetch [%#llx, +%llu): %s%s", static_cast<ull>(start),
                    static_cast<ull>(len), std::strerror(err),
                    err == ENOMEM ? " (part of the range is not mapped)" : "");
}

}  // namespace

void SimNic::describe_operations() {
  MemoryOperations& ops = capabilities_.operations;
  ops.rereg = {true, ""};
  ops.odp = {true, ""};
  ops.implicit_odp = {true, ""};
  ops.advise = {true, ""};
  ops.indirect = {true, ""};
  if (options_.key_size > sizeof(uint64_t)) {
    ops.memory_windows = unsupported(
        "sim", "has no memory windows with 16-byte raw keys (a window's key is 64-bit)");
  } else {
    ops.memory_windows = {true, ""};
  }
}

Status SimNic::slice(const SimRegion& region, uint64_t addr, uint64_t len,
                     std::vector<iovec>& pieces, uint64_t& offset) {
  // local_ranges and segments run in parallel, range i holding the bytes of segment i.
  if (region.local_ranges.size() != region.segments.size() || len == 0) {
    return make_error(HMR_EINVAL, "the registration has no host bytes at [%#llx, +%llu)",
                      static_cast<ull>(addr), static_cast<ull>(len));
  }
  uint64_t before = 0;  // bytes of the registration ahead of the current range
  for (size_t i = 0; i < region.local_ranges.size(); ++i) {
    const iovec& range = region.local_ranges[i];
    const uintptr_t first = address_of(range.iov_base);
    if (addr >= first && len <= range.iov_len && addr - first <= range.iov_len - len) {
      const uint64_t into = addr - first;
      pieces.push_back(
          {reinterpret_cast<void*>(address_of(region.segments[i].iov_base) + into), len});
      offset = before + into;
      return ok_status();
    }
    before += range.iov_len;
  }
  return make_error(HMR_EINVAL, "[%#llx, +%llu) is not inside one range of the registration",
                    static_cast<ull>(addr), static_cast<ull>(len));
}

Status SimNic::rereg(Registration& registration, const ReregRequest& request) {
  if (request.protection_domain != nullptr) {
    return make_error(HMR_ENOSYS, "the sim NIC has no protection domains to move a "
                                  "registration between");
  }
  auto* region = static_cast<SimRegion*>(registration.handle);
  if (!request.translation.empty() && region->track_page_changes) {
    // Outside the table lock: the tracker's callback takes it.
    HMR_RETURN_IF_ERROR(watch_segments(request.translation));
  }
  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  if (table_.find_by_desc(region) != region || region->kind != SimRegionKind::registration) {
    return make_error(HMR_EINVAL, "sim NIC: not a live registration");
  }
  if (region->dmabuf || !region->device_memory.empty()) {
    return make_error(HMR_EOPNOTSUPP, "sim NIC re-registers host ranges only; this registration "
                                      "is a dma-buf or device memory");
  }
  // Everything that can fail comes before the region changes.
  std::optional<KeyBytes> new_key;
  if (!request.translation.empty() && !region->requested_key) {
    Result<KeyBytes> key = fresh_key();
    if (!key.ok()) return key.status();
    new_key = *key;
  }
  if (!request.translation.empty() && capabilities_.pins_host_memory) {
    const uint64_t bytes = pinned_bytes_of(std::span<const iovec>(request.translation));
    HMR_RETURN_IF_ERROR(pin(bytes, region->pinned_bytes));  // the new pages replace the old
    region->pinned_bytes = bytes;
  }
  if (!request.translation.empty()) {
    region->segments = request.translation;
    region->local_ranges = region->segments;
    region->length = 0;
    for (const iovec& segment : region->segments) region->length += segment.iov_len;
    region->base_addr = region->virt_addr ? address_of(region->segments[0].iov_base) : 0;
    region->stale.store(false, std::memory_order_release);
    // A new translation gets a new key, as ibv_rereg_mr gives one: a peer holding the old
    // key must not reach the new bytes.  A key the application chose stays its own.
    if (new_key) table_.rekey(region, *new_key);
  }
  if (request.access) region->access = *request.access;
  registration.key = region->key;
  registration.base_addr = region->base_addr;
  return ok_status();
}

Result<MemoryWindow> SimNic::alloc_window(WindowType type) {
  if (type != WindowType::type1 && type != WindowType::type2) {
    return make_error(HMR_EINVAL, "memory window type %d: use 1 or 2", static_cast<int>(type));
  }
  MemoryWindow window;
  window.type = type;
  window.handle = new SimWindow{type, nullptr};
  return window;
}

Status SimNic::bind_window(MemoryWindow& window, const WindowBind& bind) {
  auto* sim_window = static_cast<SimWindow*>(window.handle);
  if (sim_window == nullptr || bind.registration == nullptr) {
    return make_error(HMR_EINVAL, "binding needs a memory window and a registration");
  }
  if (bind.queue != nullptr) {
    return make_error(HMR_EINVAL, "the sim NIC binds windows in the call: pass no queue");
  }
  if (bind.access == 0 || (bind.access & ~kWindowAccess) != 0) {
    return make_error(HMR_EINVAL, "a memory window's access is HMR_REMOTE_READ and/or "
                      "HMR_REMOTE_WRITE (got %#llx)", static_cast<ull>(bind.access));
  }
  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  auto* target = static_cast<SimRegion*>(bind.registration->handle);
  if (table_.find_by_desc(target) != target || target->kind != SimRegionKind::registration) {
    return make_error(HMR_EINVAL, "sim NIC: the window's MR is not a live registration");
  }
  if ((target->access & HMR_MW_BIND) == 0) {
    return make_error(HMR_EINVAL, "the MR was registered without HMR_MW_BIND access; windows "
                                  "cannot be bound to it");
  }
  if ((target->access & bind.access) != bind.access) {
    return make_error(HMR_EACCES, "the window asks for access %#llx, but its MR grants only "
                      "%#llx", static_cast<ull>(bind.access),
                      static_cast<ull>(target->access & kWindowAccess));
  }
  if (sim_window->bound != nullptr && sim_window->type == WindowType::type2) {
    return make_error(HMR_EBUSY, "a type 2 window is bound; invalidate it before binding it again");
  }
  auto bound = std::make_unique<SimRegion>();
  uint64_t offset = 0;
  HMR_RETURN_IF_ERROR(slice(*target, bind.addr, bind.len, bound->segments, offset));
  Result<KeyBytes> key = fresh_key();
  if (!key.ok()) return key.status();
  bound->kind = SimRegionKind::window;
  bound->key = *key;
  bound->access = bind.access;
  bound->length = bind.len;
  // Peers address the window's bytes as they address the MR's.
  bound->base_addr = target->base_addr + offset;
  bound->remote.enabled = true;  // the MR's own state gates it (parents)
  bound->parents.push_back(target);
  if (sim_window->bound != nullptr) table_.erase(sim_window->bound);  // a type 1 re-bind
  sim_window->bound = table_.insert(std::move(bound));
  window.key = *key;
  return ok_status();
}

Status SimNic::invalidate_window(MemoryWindow& window, void* queue, uint64_t, bool) {
  auto* sim_window = static_cast<SimWindow*>(window.handle);
  if (sim_window == nullptr) return make_error(HMR_EINVAL, "not a memory window of this NIC");
  if (queue != nullptr) {
    return make_error(HMR_EINVAL, "the sim NIC invalidates windows in the call: pass no queue");
  }
  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  if (sim_window->bound == nullptr) return make_error(HMR_EINVAL, "the memory window is not bound");
  table_.erase(sim_window->bound);
  sim_window->bound = nullptr;
  window.key = KeyBytes();
  return ok_status();
}

Status SimNic::dealloc_window(MemoryWindow& window) {
  auto* sim_window = static_cast<SimWindow*>(window.handle);
  if (sim_window == nullptr) return make_error(HMR_EINVAL, "not a memory window of this NIC");
  {
    std::unique_lock<std::shared_mutex> lock(table_mutex_);
    if (sim_window->bound != nullptr) table_.erase(sim_window->bound);
  }
  delete sim_window;
  window.handle = nullptr;
  return ok_status();
}

Status SimNic::advise(const Registration& registration, Advice advice,
                      std::span<const iovec> ranges, bool) {
  bool writable = false;
  std::vector<iovec> host;
  {
    std::shared_lock<std::shared_mutex> lock(table_mutex_);
    auto* region = static_cast<SimRegion*>(registration.handle);
    if (table_.find_by_desc(region) != region || region->kind != SimRegionKind::registration) {
      return make_error(HMR_EINVAL, "sim NIC: not a live registration");
    }
    if (!region->on_demand_paging) {
      return make_error(HMR_EINVAL, "prefetch advice needs an on-demand-paging registration");
    }
    writable = (region->access & (HMR_REMOTE_WRITE | HMR_WRITE | HMR_RECV)) != 0;
    for (const iovec& range : ranges) {
      uint64_t offset = 0;
      HMR_RETURN_IF_ERROR(slice(*region, address_of(range.iov_base), range.iov_len, host, offset));
    }
  }
  // Populating may fault pages in for a long time: outside the table lock.
  const bool for_write = advice == Advice::prefetch_write && writable;
  for (const iovec& range : host) {
    const Status populated = populate(address_of(range.iov_base), range.iov_len, for_write);
    if (!populated.ok() && advice != Advice::prefetch_no_fault) return populated;
  }
  return ok_status();
}

Result<Registration> SimNic::register_indirect(std::span<const IndirectSegment> segments,
                                               uint64_t access) {
  auto region = std::make_unique<SimRegion>();
  region->kind = SimRegionKind::indirect;
  region->access = access;
  region->remote.enabled = true;
  region->base_addr = 0;  // an indirect key's bytes are addressed from 0, in segment order
  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  for (size_t i = 0; i < segments.size(); ++i) {
    const IndirectSegment& segment = segments[i];
    auto* target = segment.registration != nullptr
                       ? static_cast<SimRegion*>(segment.registration->handle)
                       : nullptr;
    if (target == nullptr || table_.find_by_desc(target) != target ||
        target->kind != SimRegionKind::registration) {
      return make_error(HMR_EINVAL, "indirect segment %zu: not a live registration of this NIC", i);
    }
    if (!target->device_memory.empty()) {
      return make_error(HMR_EOPNOTSUPP, "indirect segment %zu: the sim NIC cannot move %s", i,
                        target->device_memory.c_str());
    }
    uint64_t offset = 0;
    const Status sliced = slice(*target, segment.addr, segment.len, region->segments, offset);
    if (!sliced.ok()) {
      return make_error(sliced.code(), "indirect segment %zu: %s", i, sliced.reason().c_str());
    }
    if (__builtin_add_overflow(region->length, segment.len, &region->length)) {
      return make_error(HMR_EINVAL, "the indirect key's segments add up to more than 2^64 bytes");
    }
    region->parents.push_back(target);
  }
  Result<KeyBytes> key = fresh_key();
  if (!key.ok()) return key.status();
  region->key = *key;
  Registration registration;
  registration.key = region->key;
  registration.base_addr = 0;
  SimRegion* inserted = table_.insert(std::move(region));
  registration.handle = inserted;
  registration.desc = inserted;
  return registration;
}

}  // namespace hmr::nic::sim
