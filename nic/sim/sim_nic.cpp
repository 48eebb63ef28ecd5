#include "nic/sim/sim_nic.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "hmem/hmem_registry.h"

namespace hmr::nic::sim {
namespace {

constexpr uint64_t kPageSize = 4096;

uintptr_t address_of(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

// Moves `len` bytes between `local` and the region's bytes starting at `offset`, through
// the kernel so that an unreachable page is an error, not a crash.
Status transfer(const SimRegion& region, bool to_region, uint64_t offset, void* local,
                size_t len) {
  auto* cursor = static_cast<uint8_t*>(local);
  for (const iovec& segment : region.segments) {
    if (len == 0) break;
    if (offset >= segment.iov_len) {
      offset -= segment.iov_len;
      continue;
    }
    const size_t chunk = std::min<size_t>(len, segment.iov_len - offset);
    iovec local_iov = {cursor, chunk};
    // Integer arithmetic: an implicit ODP segment starts at address 0.
    iovec region_iov = {reinterpret_cast<void*>(address_of(segment.iov_base) + offset), chunk};
    const ssize_t moved = to_region ? process_vm_writev(getpid(), &local_iov, 1, &region_iov, 1, 0)
                                    : process_vm_readv(getpid(), &local_iov, 1, &region_iov, 1, 0);
    if (moved != static_cast<ssize_t>(chunk)) {
      const int err = moved < 0 ? errno : EFAULT;
      return make_error(HMR_EFAULT,
                        "sim NIC could not %s %zu bytes at %p: %s (page unmapped or protected)",
                        to_region ? "write" : "read", chunk, region_iov.iov_base,
                        std::strerror(err));
    }
    cursor += chunk;
    len -= chunk;
    offset = 0;
  }
  return ok_status();
}

uint64_t needed_remote_access(RmaOp op) {
  switch (op) {
    case RmaOp::write: return HMR_REMOTE_WRITE;
    case RmaOp::read: return HMR_REMOTE_READ;
    case RmaOp::fetch_add: return HMR_REMOTE_READ | HMR_REMOTE_WRITE;
  }
  return 0;
}

void count_remote_event(const SimRegion& region, RmaOp op) {
  const uint64_t event = op == RmaOp::read ? HMR_REMOTE_READ : HMR_REMOTE_WRITE;
  for (const CounterBinding& binding : region.remote.counters) {
    if (binding.events & event) binding.counter->fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

Result<std::unique_ptr<Nic>> SimNic::open(const char* options) {
  Result<SimOptions> parsed = parse_sim_options(options);
  if (!parsed.ok()) return parsed.status();
  return std::unique_ptr<Nic>(new SimNic(*parsed));
}

SimNic::SimNic(const SimOptions& options) : options_(options) {
  capabilities_.name = "sim";
  capabilities_.required_mr_mode = options.required_mr_mode;
  capabilities_.key_size = options.key_size;
  capabilities_.iov_limit = options.iov_limit;
  capabilities_.mr_cnt = options.mr_cnt;
  capabilities_.max_mr_size = options.max_mr_size;
  capabilities_.dmabuf_import = options.dmabuf_import;  // host dma-bufs: by mapping the fd
  capabilities_.peer_direct = options.peer_direct;
  capabilities_.pins_host_memory = options.pins || options.max_pinned_bytes != 0;
  capabilities_.max_pinned_bytes = options.max_pinned_bytes;
  capabilities_.rma = true;
  describe_operations();
  raw_key_tag_ = static_cast<uint64_t>(
                     std::chrono::steady_clock::now().time_since_epoch().count()) ^
                 address_of(this);
}

SimNic::~SimNic() = default;

Result<std::unique_ptr<SimRegion>> SimNic::build_device_region(
    const RegistrationRequest& request) {
  auto region = std::make_unique<SimRegion>();
  region->access = request.access;
  region->remote.enabled = request.enabled;
  char what[160];
  const char* iface = hmem::iface_name(request.iface);
  const auto device = static_cast<unsigned long long>(request.device);
  if (request.dmabuf != nullptr) {
    // Recorded, never mapped: a device dma-buf is for a NIC's DMA engine, not for the CPU.
    const hmr_mr_dmabuf& dmabuf = *request.dmabuf;
    std::snprintf(what, sizeof what, "%s device %llu memory as dma-buf (fd %d, offset %llu, len %zu)",
                  iface, device, dmabuf.fd, static_cast<unsigned long long>(dmabuf.offset),
                  dmabuf.len);
    region->device_dmabuf = dmabuf;
    region->local_ranges.push_back({dmabuf.base_addr, dmabuf.len});
    region->length = dmabuf.len;
    region->base_addr = request.virt_addr ? address_of(dmabuf.base_addr) : 0;
  } else {
    if (!options_.peer_direct) {
      return make_error(HMR_EOPNOTSUPP,
                        "sim NIC has no peer-direct path for %s device %llu memory at %p (the "
                        "nic option peer_direct=1 models one)",
                        iface, device, request.segments[0].iov_base);
    }
    if (request.segments.size() != 1) {
      return make_error(HMR_EOPNOTSUPP, "sim NIC registers device memory one segment at a time");
    }
    const iovec& segment = request.segments[0];
    std::snprintf(what, sizeof what, "%s device %llu memory registered peer-direct at [%p, +%zu)",
                  iface, device, segment.iov_base, segment.iov_len);
    region->local_ranges.push_back(segment);
    region->length = segment.iov_len;
    region->base_addr = request.virt_addr ? address_of(segment.iov_base) : 0;
  }
  region->device_memory = what;
  return region;
}

Result<std::unique_ptr<SimRegion>> SimNic::build_region(const RegistrationRequest& request) {
  if (request.dmabuf != nullptr && !options_.dmabuf_import) {
    return make_error(HMR_EOPNOTSUPP, "sim NIC opened with dmabuf=0 imports no dma-buf");
  }
  // Device memory the CPU must not touch: a dma-buf of a device iface, or a device VA.
  if (request.iface != HMR_HMEM_SYSTEM &&
      (request.dmabuf != nullptr || (request.flags & HMR_HMEM_DEVICE_ONLY) != 0)) {
    return build_device_region(request);
  }
  auto region = std::make_unique<SimRegion>();
  region->access = request.access;
  region->on_demand_paging = request.on_demand_paging;
  // An ODP registration follows the page tables, so a page change never makes it stale.
  region->track_page_changes = request.track_page_changes && !request.on_demand_paging;
  region->remote.enabled = request.enabled;
  region->virt_addr = request.virt_addr;
  region->requested_key = request.requested_key.has_value();
  if (request.dmabuf != nullptr) {
    const hmr_mr_dmabuf& dmabuf = *request.dmabuf;
    const uint64_t map_offset = dmabuf.offset & ~(kPageSize - 1);
    const size_t lead = dmabuf.offset - map_offset;
    void* mapped = mmap(nullptr, lead + dmabuf.len, PROT_READ | PROT_WRITE, MAP_SHARED,
                        dmabuf.fd, static_cast<off_t>(map_offset));
    if (mapped == MAP_FAILED) {
      const int err = errno;
      return make_error(err == EBADF ? HMR_EBADF : HMR_EINVAL,
                        "sim NIC cannot import dma-buf fd %d (offset %llu, len %zu): %s",
                        dmabuf.fd, static_cast<unsigned long long>(dmabuf.offset), dmabuf.len,
                        std::strerror(err));
    }
    region->dmabuf = std::make_unique<DmabufMapping>(mapped, lead + dmabuf.len);
    region->segments.push_back({static_cast<uint8_t*>(mapped) + lead, dmabuf.len});
    region->local_ranges.push_back({dmabuf.base_addr, dmabuf.len});
    region->base_addr = request.virt_addr ? address_of(dmabuf.base_addr) : 0;
  } else {
    region->segments.assign(request.segments.begin(), request.segments.end());
    region->local_ranges = region->segments;
    region->base_addr = request.virt_addr ? address_of(request.segments[0].iov_base) : 0;
  }
  for (const iovec& segment : region->segments) region->length += segment.iov_len;
  return region;
}

Status SimNic::watch_segments(const std::vector<iovec>& segments) {
  {
    std::lock_guard<std::mutex> lock(tracker_mutex_);
    if (!tracker_) {
      Result<std::unique_ptr<core::UffdWatcher>> tracker = core::UffdWatcher::start(
          tracker_pending_,
          [this](const core::AddressRangeEvent& change) { mark_stale(change.start, change.end); },
          "sim NIC page-change tracker");
      if (!tracker.ok()) return tracker.status();
      tracker_ = std::move(*tracker);
    }
  }
  for (const iovec& segment : segments) {
    HMR_RETURN_IF_ERROR(tracker_->watch(address_of(segment.iov_base), segment.iov_len));
  }
  return ok_status();
}

Status SimNic::choose_key(const RegistrationRequest& request, SimRegion& region) {
  if (request.requested_key) {
    if (table_.key_in_use(*request.requested_key)) {
      return make_error(HMR_ENOKEY, "key %#llx is already registered on this sim NIC",
                        static_cast<unsigned long long>(*request.requested_key));
    }
    region.key = KeyBytes::from_u64(*request.requested_key, options_.key_size);
    return ok_status();
  }
  Result<KeyBytes> key = fresh_key();
  if (!key.ok()) return key.status();
  region.key = *key;
  return ok_status();
}

Result<KeyBytes> SimNic::fresh_key() {
  const uint64_t key_mask =
      options_.key_size >= 8 ? UINT64_MAX : (1ULL << (8 * options_.key_size)) - 1;
  for (uint64_t tries = 0; tries <= key_mask; ++tries) {
    const uint64_t candidate = next_key_++ & key_mask;
    if (table_.key_in_use(candidate)) continue;
    KeyBytes key = KeyBytes::from_u64(candidate, options_.key_size);
    if (options_.key_size == 16) std::memcpy(key.bytes + 8, &raw_key_tag_, 8);
    return key;
  }
  return make_error(HMR_ENOSPC, "sim NIC has no free %zu-byte key left", options_.key_size);
}

Status SimNic::pin(uint64_t bytes, uint64_t released) {
  // As a kernel driver charges pinned pages and refuses past the limit with ENOMEM
  // (ib_umem_get), with the option's bound in place of RLIMIT_MEMLOCK.
  const uint64_t after = pinned_bytes_ - released + bytes;
  if (options_.max_pinned_bytes != 0 && after > options_.max_pinned_bytes) {
    return make_error(HMR_ENOMEM, "sim NIC: pinning %llu more bytes would hold %llu, past its "
                      "max_pinned of %llu", static_cast<unsigned long long>(bytes),
                      static_cast<unsigned long long>(after),
                      static_cast<unsigned long long>(options_.max_pinned_bytes));
  }
  pinned_bytes_ = after;
  return ok_status();
}

Result<Registration> SimNic::register_memory(const RegistrationRequest& request) {
  if (request.flags & HMR_RMA_PMEM) {
    return make_error(HMR_EOPNOTSUPP, "sim NIC has no persistent-memory write semantics");
  }
  Result<std::unique_ptr<SimRegion>> built = build_region(request);
  if (!built.ok()) return built.status();
  std::unique_ptr<SimRegion> region = std::move(*built);
  if (region->track_page_changes && request.dmabuf == nullptr && region->device_memory.empty()) {
    HMR_RETURN_IF_ERROR(watch_segments(region->segments));
  }

  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  if (capabilities_.pins_host_memory) {
    region->pinned_bytes = pinned_bytes_of(request);
    HMR_RETURN_IF_ERROR(pin(region->pinned_bytes, 0));
  }
  if (Status chosen = choose_key(request, *region); !chosen.ok()) {
    pinned_bytes_ -= region->pinned_bytes;
    return chosen;
  }
  Registration registration;
  registration.key = region->key;
  registration.base_addr = region->base_addr;
  const uint64_t pinned = region->pinned_bytes;
  SimRegion* inserted = nullptr;
  try {
    inserted = table_.insert(std::move(region));
  } catch (...) {  // (out of memory): the pages it pinned are the NIC's to give back
    pinned_bytes_ -= pinned;
    throw;
  }
  registration.handle = inserted;
  registration.desc = inserted;
  return registration;
}

Status SimNic::deregister(Registration& registration) {
  std::unique_ptr<SimRegion> region;
  {
    std::unique_lock<std::shared_mutex> lock(table_mutex_);
    region = table_.erase(static_cast<SimRegion*>(registration.handle));
    if (region) pinned_bytes_ -= region->pinned_bytes;
  }
  if (!region) return make_error(HMR_EINVAL, "sim NIC: registration is not live");
  registration = Registration();
  return ok_status();  // a dma-buf mapping is released here, outside the lock
}

Status SimNic::refresh(Registration& registration, std::span<const iovec> segments) {
  auto* region = static_cast<SimRegion*>(registration.handle);
  std::vector<iovec> to_watch(segments.begin(), segments.end());
  if (region->track_page_changes) HMR_RETURN_IF_ERROR(watch_segments(to_watch));
  std::shared_lock<std::shared_mutex> lock(table_mutex_);
  region->stale.store(false, std::memory_order_release);
  return ok_status();
}

Status SimNic::set_remote_access(Registration& registration, RemoteAccess access) {
  std::unique_lock<std::shared_mutex> lock(table_mutex_);
  static_cast<SimRegion*>(registration.handle)->remote = std::move(access);
  return ok_status();
}

Status SimNic::check_local(void* desc, const void* buf, size_t len, uint64_t access) {
  std::shared_lock<std::shared_mutex> lock(table_mutex_);
  const SimRegion* region = table_.find_by_desc(desc);
  if (region == nullptr || region->kind == SimRegionKind::window) {
    return make_error(HMR_EINVAL, "desc %p is not a live registration of this domain", desc);
  }
  if (!region->device_memory.empty()) {
    return make_error(HMR_EOPNOTSUPP,
                      "sim NIC cannot move device memory: the local MR holds %s (a real NIC "
                      "would DMA it)",
                      region->device_memory.c_str());
  }
  if ((region->access & access) != access) {
    return make_error(HMR_EACCES, "local MR lacks %s access for this operation",
                      access == HMR_WRITE ? "HMR_WRITE" : "HMR_READ");
  }
  const uintptr_t first = address_of(buf);
  for (const iovec& range : region->local_ranges) {
    const uintptr_t start = address_of(range.iov_base);
    if (first >= start && len <= range.iov_len && first - start <= range.iov_len - len) {
      return ok_status();
    }
  }
  return make_error(HMR_EINVAL, "local buffer [%p, +%zu) is outside the MR named by desc", buf,
                    len);
}

Status SimNic::remote_access(const RmaRequest& request) {
  // Before the table lock: the tracker's callback takes it too.
  while (tracker_pending_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::shared_lock<std::shared_mutex> lock(table_mutex_);
  const SimRegion* region = table_.find_by_key(request.key);
  if (region == nullptr) {
    return make_error(HMR_EACCES, "remote key %#llx is not registered at the target",
                      static_cast<unsigned long long>(request.key.low_u64()));
  }
  HMR_RETURN_IF_ERROR(check_reachable(*region, request));
  for (const SimRegion* parent : region->parents) {
    HMR_RETURN_IF_ERROR(check_reachable(*parent, request));
  }
  const uint64_t needed = needed_remote_access(request.op);
  if ((region->access & needed) != needed) {
    return make_error(HMR_EACCES, "target MR (key %#llx) does not grant %s",
                      static_cast<unsigned long long>(request.key.low_u64()),
                      needed == HMR_REMOTE_WRITE  ? "HMR_REMOTE_WRITE"
                      : needed == HMR_REMOTE_READ ? "HMR_REMOTE_READ"
                                                  : "HMR_REMOTE_READ|HMR_REMOTE_WRITE");
  }
  const uint64_t offset = request.addr - region->base_addr;
  if (request.addr < region->base_addr || request.len > region->length ||
      offset > region->length - request.len) {
    return make_error(HMR_EFAULT,
                      "RMA [%#llx, +%zu) is outside the target MR [%#llx, +%llu) (key %#llx)",
                      static_cast<unsigned long long>(request.addr), request.len,
                      static_cast<unsigned long long>(region->base_addr),
                      static_cast<unsigned long long>(region->length),
                      static_cast<unsigned long long>(request.key.low_u64()));
  }
  if (!region->device_memory.empty()) {
    return make_error(HMR_EOPNOTSUPP,
                      "sim NIC cannot move device memory: target MR (key %#llx) holds %s (a real "
                      "NIC would DMA it)",
                      static_cast<unsigned long long>(request.key.low_u64()),
                      region->device_memory.c_str());
  }
  switch (request.op) {
    case RmaOp::write:
      HMR_RETURN_IF_ERROR(transfer(*region, true, offset, request.local, request.len));
      break;
    case RmaOp::read:
      HMR_RETURN_IF_ERROR(transfer(*region, false, offset, request.local, request.len));
      break;
    case RmaOp::fetch_add: {
      // An atomic is one 8-byte access of one memory location: it cannot be split over two
      // pieces of memory (an indirect key's segments), as no NIC splits it.
      if (!within_one_segment(*region, offset, sizeof(uint64_t))) {
        return make_error(HMR_EINVAL, "an atomic at offset %llu of indirect key %#llx crosses "
                          "the boundary between two of its segments",
                          static_cast<unsigned long long>(offset),
                          static_cast<unsigned long long>(request.key.low_u64()));
      }
      std::lock_guard<std::mutex> atomic_lock(atomics_mutex_);
      uint64_t value = 0;
      HMR_RETURN_IF_ERROR(transfer(*region, false, offset, &value, sizeof value));
      const uint64_t previous = value;
      value += request.operand;
      HMR_RETURN_IF_ERROR(transfer(*region, true, offset, &value, sizeof value));
      *request.result = previous;
      break;
    }
  }
  count_remote_event(*region, request.op);
  for (const SimRegion* parent : region->parents) count_remote_event(*parent, request.op);
  return ok_status();
}

bool SimNic::within_one_segment(const SimRegion& region, uint64_t offset, uint64_t len) {
  uint64_t segment_start = 0;
  for (const iovec& segment : region.segments) {
    if (offset < segment_start + segment.iov_len) {
      return offset - segment_start <= segment.iov_len - len && len <= segment.iov_len;
    }
    segment_start += segment.iov_len;
  }
  return false;
}

Status SimNic::check_reachable(const SimRegion& region, const RmaRequest& request) {
  const auto key = static_cast<unsigned long long>(request.key.low_u64());
  if (!region.remote.enabled) {
    return make_error(HMR_EACCES, "target MR (key %#llx) is not enabled", key);
  }
  if (region.remote.endpoint != nullptr && region.remote.endpoint != request.target_endpoint) {
    return make_error(HMR_EACCES, "target MR (key %#llx) is bound to another endpoint", key);
  }
  if (region.track_page_changes && region.stale.load(std::memory_order_acquire)) {
    return make_error(HMR_EFAULT,
                      "target MR (key %#llx) has a stale translation: its pages changed; the "
                      "owner must call hmr_mr_refresh (the domain requires MMU_NOTIFY)",
                      key);
  }
  return ok_status();
}

void SimNic::mark_stale(uintptr_t start, uintptr_t end) {
  // Runs on the tracker thread while an unmapping thread waits; the table lock is never
  // held by anyone who unmaps, so taking it here cannot deadlock.
  std::shared_lock<std::shared_mutex> lock(table_mutex_);
  table_.for_each_overlapping(start, end, [](SimRegion& region) {
    if (region.track_page_changes) region.stale.store(true, std::memory_order_release);
  });
}

}  // namespace hmr::nic::sim
