// The cache hit path of hmr_mr_reg: one pass from the C ABI to the cache and back.
//
// It serves exactly the requests whose answer is "the cached registration of this host range":
// one segment, no flags, no requested key (provider keys), no endpoint binding, no event
// queue, a range a live host-cache entry covers.  The NIC's mr_cnt limit is honoured through
// per-thread credits (util/credit_pool.h): plain stores to the thread's own cache line, never a
// shared lock.  The entry's owner thread takes and gives its reference with plain stores too
// (cache/cache_entry.h), so its hit and close make no locked instruction.
// Everything else — and every miss — returns nullptr and takes the full path, which also
// reports every error with its reason.  On the way: no domain mutex, no allocation (handles
// come from a per-thread free list), no condition variable, no vector, no virtual call;
// counters are per thread.
// The full path ends here too for the same kind of request: once it has validated and
// classified a miss and the cache has registered the range, the caller gets a CachedMr
// (register_shared), not a heap MemoryRegion, so a first registration closes like a hit.
#include "cache/registration_cache.h"
#include "core/cached_mr.h"
#include "core/domain.h"
#include "core/memory_region.h"
#include "hmem/hmem_registry.h"
#include "monitor/device_monitor.h"
#include "registration/export_policy.h"
#include "registration/mr_request.h"
#include "util/asymmetric_fence.h"

namespace hmr::core {

void Domain::enable_hit_path() {
  MrRequest host;
  host.iface = HMR_HMEM_SYSTEM;
  hit_key_ = cache_key(host);
  // The same conditions as cacheable() for a plain host request, decided once — see
  // register_memory() for the full rules.  mr_cnt is honoured through mr_credits_.
  hit_path_ = cache_ != nullptr && has_mode(HMR_MR_PROV_KEY) && !has_mode(HMR_MR_ENDPOINT);
  device_hit_path_ =
      device_cache_ != nullptr && has_mode(HMR_MR_PROV_KEY) && !has_mode(HMR_MR_ENDPOINT);
}

// Inlined into the hit path and the close: each is a few stores to the thread's own lines.
[[gnu::always_inline]] inline void Domain::close_shared(ThreadSlot slot, uint64_t length) {
  hit_counters_.add(slot, kHitOpen, -1);
  hit_counters_.add(slot, kHitBytes, -static_cast<int64_t>(length));
}

[[gnu::always_inline]] inline bool Domain::open_shared(ThreadSlot slot, uint64_t length) {
  hit_counters_.add(slot, kHitOpen, 1);
  hit_counters_.add(slot, kHitBytes, static_cast<int64_t>(length));
  // Dekker with bind_event_queue(): our count before its flag, its flag before its count
  // (util/asymmetric_fence.h).  So it either sees this MR open and refuses to bind, or we see
  // the flag and leave the MR to the full path, which makes it asynchronous.
  light_fence();
  if (__builtin_expect(!async_bound_.load(std::memory_order_relaxed), 1)) return true;
  close_shared(slot, length);
  return false;
}

[[gnu::always_inline]] inline CachedMr* Domain::hand_out(RegistrationCache& cache,
                                                        const CacheHandle& handle,
                                                        uintptr_t start, uint64_t length,
                                                        uint64_t access, void* context,
                                                        ThreadSlot slot) {
  hit_counters_.add(slot, kHitRegistrations, 1);
  return CachedMr::make(*this, cache, handle, start, length, access, context, raw_keys());
}

// What validate_mr_request() would refuse is the full path's to refuse, with its reason.
[[gnu::always_inline]] inline bool Domain::hit_arguments_ok(const void* buf, size_t len,
                                                             uint64_t access) const {
  const auto start = reinterpret_cast<uintptr_t>(buf);
  return buf != nullptr && len != 0 && start + len >= start && len <= rules_.max_mr_size &&
         access != 0 && (access & ~kCacheableAccess) == 0;
}

// A hit's handle for `handle` (a reference in `cache`), after the MR's mr_cnt credit and its
// count as open; nullptr, with the reference given back, when either is refused.
[[gnu::always_inline]] inline CachedMr* Domain::claim_hit(RegistrationCache& cache,
                                                         const CacheHandle& handle,
                                                         uintptr_t start, uint64_t length,
                                                         uint64_t access, void* context,
                                                         ThreadSlot slot) {
  // mr_cnt: with no credit left the full path says ENOSPC with its reason.
  if (!mr_credits_.take(slot)) {
    cache.put(handle, slot);
    return nullptr;
  }
  if (!open_shared(slot, length)) {  // an event queue was bound meanwhile: the full path's MR
    mr_credits_.give(slot);
    cache.put(handle, slot);
    return nullptr;
  }
  return hand_out(cache, handle, start, length, access, context, slot);
}

CachedMr* Domain::try_cached_hit(const void* buf, size_t len, uint64_t access, void* context,
                                 RegistrationCache::Probe& probed) {
  if (!hit_path_ || async_bound_.load(std::memory_order_relaxed)) return nullptr;
  if (!hit_arguments_ok(buf, len, access)) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(buf);
  // No classification here, even with device runtimes loaded: the host cache files only
  // ranges the full path classified as system memory, and the monitor drops an entry when its
  // range is unmapped, so a live entry covering [buf, +len) means the range is still the
  // host mapping it was.  A device runtime cannot map its memory over a live host mapping
  // without unmapping it first (its own allocations are fresh VA), which the monitor sees.
  // (Host memory pinned later with cudaHostRegister and the like stays system memory to hmr:
  // the registration is of the same pages and stays valid for RMA.)
  CachedMr::reserve();  // the one step that may fail for want of memory, before any is taken
  const ThreadSlot slot = this_thread_slot();  // once, for every per-thread structure below
  const CacheHandle handle = cache_->find(start, len, hit_key(access), slot, probed);
  if (!handle) return nullptr;
  return claim_hit(*cache_, handle, start, len, access, context, slot);
}

// The device cache's key for a hit of `access` on this allocation by export path `mode`, as
// device_cache_key() builds it for a resolved request.  Built whole (CacheKey::whole) each
// time: a key changed or built field by field in memory and then read in wider pieces (the
// lookup's key tag and comparisons) made every lookup wait for its stores, ~10 ns a hit.
[[gnu::always_inline]] inline CacheKey Domain::device_hit_key(
    uint64_t access, const DeviceDeclaration& declared, int iface, uint64_t device,
    uint64_t alloc_id, ExportMode mode) const {
  return CacheKey::whole(alloc_id, static_cast<int32_t>(device), static_cast<uint16_t>(access),
                         static_cast<uint8_t>(iface), static_cast<uint8_t>(mode),
                         hit_key_.exact_start && !declared.reported_base);
}

namespace {

// Whether a declaration contradicts what the runtime says the memory is: the full path's to
// refuse, with its reason (hmem::Registry::verify's rules).  Another runtime, or another
// device — except for pinned host memory, which every device reaches, so a declaration of
// any device is none (one staging pool shared by several GPUs; verify() accepts it and files
// the registration under the device the runtime names, which the hit's key uses too).
bool contradicts(const DeviceDeclaration& declared, int iface, uint64_t device,
                 bool any_device) {
  return declared.iface != HMR_HMEM_SYSTEM &&
         (declared.iface != iface || (declared.device != device && !any_device));
}

}  // namespace

CachedMr* Domain::try_device_hit(const void* buf, size_t len, uint64_t access, void* context,
                                 const DeviceDeclaration& declared) {
  if (!device_hit_path_ || async_bound_.load(std::memory_order_relaxed)) return nullptr;
  // An HMR_MR_HMEM application declares what its memory is; undeclared means system memory,
  // which device memory is not (the full path says so).
  if (declared.iface == HMR_HMEM_SYSTEM && declares_memory_) return nullptr;
  if (!hit_arguments_ok(buf, len, access)) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(buf);
  // Nothing filed: no question to any runtime (a host miss of a process that never cached
  // device memory pays nothing for this path).
  if (device_cache_->empty()) return nullptr;
  const ThreadSlot slot = this_thread_slot();
  // Memory whose runtime reports its free, hit by this thread since the last free reported:
  // no question at all (core/recent_device_ranges.h).
  RecentDeviceRanges::Identity known;
  if (recent_device_.contains(slot, start, len, &known)) {
    if (CachedMr* hit = hit_from_hint(start, len, access, context, declared, known, slot)) {
      return hit;
    }
  }
  // The one question to the runtime: whose memory, which allocation (CUDA: one
  // cuPointerGetAttributes).  An entry is filed under the identity of the allocation it was
  // made for, which the runtime never gives to another (CUDA's BUFFER_ID is never reused), so
  // an entry found under the identity asked now is this allocation's: freed and allocated
  // again at the same address, the memory has another identity and finds nothing.
  // (The generation is read before the question: a free reported after it makes the hint
  // recorded below one that is not trusted.)
  // Only the runtimes whose memory was filed here are asked (another's cannot be found
  // cached), and of declared memory only the declared runtime, as the full path's verify()
  // asks it alone: so a hit asks its own runtime once, whichever others are loaded before it.
  const uint64_t generation = DeviceMonitor::instance().generation();
  uint32_t asked = device_ifaces_filed_.load(std::memory_order_relaxed);
  if (declared.iface != HMR_HMEM_SYSTEM) asked &= 1u << declared.iface;
  if (asked == 0) return nullptr;
  hmem::AllocationIdentity memory;
  if (!hmem::Registry::global().identify(buf, len, memory, asked).ok() ||
      memory.iface == HMR_HMEM_SYSTEM ||
      !environment_.device_cache[static_cast<size_t>(memory.iface)]) {
    return nullptr;
  }
  const bool any_device = memory.kind == hmem::MemoryKind::host_alloc;
  if (contradicts(declared, memory.iface, memory.device, any_device)) return nullptr;
  CachedMr::reserve();  // the one step that may fail for want of memory, before any is taken
  CacheHandle handle;
  // Whichever path the registration took (the export plan's choice for this memory then):
  // each is a registration of this allocation with this access, and serves alike.  (The key
  // is made afresh inside the loop, so it stays in registers: see device_hit_key().)
  for (const ExportMode mode : {ExportMode::dmabuf, ExportMode::peer_direct, ExportMode::host_va,
                                ExportMode::host_shadow}) {
    RegistrationCache::Probe probed = RegistrationCache::Probe::not_done;
    handle = device_cache_->find(
        start, len,
        device_hit_key(access, declared, memory.iface, memory.device, memory.alloc_id, mode),
        slot, probed);
    if (handle) break;
  }
  if (!handle) return nullptr;
  // Memory whose free is reported to hmr — by its runtime (ROCr, allocation id 0), or by the
  // application where it promised so (HMR_CUDA_FREES_REPORTED) — a hint can then serve
  // without this question.
  if (memory.alloc_id == 0 || frees_reported_by_application(memory.iface)) {
    remember_device_hit(slot, *handle.entry, generation, any_device);
  }
  return claim_hit(*device_cache_, handle, start, len, access, context, slot);
}

void Domain::remember_device_hit(ThreadSlot slot, const CacheEntry& entry, uint64_t generation,
                                 bool any_device) {
  const CacheKey& key = entry.key;  // (the hit's key but for access, which a hint leaves out)
  RecentDeviceRanges::Identity identity;
  identity.iface = key.iface;
  identity.export_mode = key.export_mode;
  identity.device = static_cast<uint32_t>(key.device);
  identity.any_device = any_device;
  identity.generation = generation;
  identity.alloc_id = key.alloc_id;
  RecentDeviceRanges::Identity known;
  if (recent_device_.contains(slot, entry.start, entry.length, &known) &&
      known.iface == identity.iface && known.export_mode == identity.export_mode &&
      known.device == identity.device && known.any_device == any_device &&
      known.generation == generation && known.alloc_id == identity.alloc_id) {
    return;  // (already so: no lock taken below)
  }
  // Trusted without the runtime later only where this allocation's free is reported (by the
  // runtime's callback, or by the application that promised it), and only for a thread's
  // own slot (recent_device_ranges.h).
  identity.frees_reported =
      slot.exclusive && (frees_reported_by_application(key.iface) ||
                         DeviceMonitor::instance().frees_reported(entry.start, entry.length));
  recent_device_.remember(slot, entry.start, entry.end(), identity);
}

CachedMr* Domain::hit_from_hint(uintptr_t start, size_t len, uint64_t access, void* context,
                                const DeviceDeclaration& declared,
                                const RecentDeviceRanges::Identity& known, ThreadSlot slot) {
  // Memory whose runtime reports its free, and no free reported since the hint was taken: a
  // registration still cached under its key is still the allocation's, since the runtime's
  // callback drops it when the memory is freed.
  if (!known.frees_reported || known.generation != DeviceMonitor::instance().generation()) {
    return nullptr;
  }
  // A declaration the hint contradicts is for the runtime's answer to settle.
  if (contradicts(declared, known.iface, known.device, known.any_device)) return nullptr;
  CachedMr::reserve();
  const CacheKey key = device_hit_key(access, declared, known.iface, known.device,
                                      known.alloc_id, static_cast<ExportMode>(known.export_mode));
  RegistrationCache::Probe probed = RegistrationCache::Probe::not_done;
  const CacheHandle handle = device_cache_->find(start, len, key, slot, probed);
  if (!handle) return nullptr;
  return claim_hit(*device_cache_, handle, start, len, access, context, slot);
}

bool Domain::shared_like_a_hit(const MrRequest& request) const {
  // try_cached_hit()'s conditions, on a request the full path has validated and classified:
  // what a later hit of the range would hand out anyway.  cacheable() says the rest: one
  // segment (so no dma-buf), no flags, system memory once resolved; and hit_path_ implies
  // PROV_KEY, under which no key is ever requested.
  return hit_path_ && !async_bound_.load(std::memory_order_relaxed) && cacheable(request);
}

std::optional<Result<Domain::Registered>> Domain::register_shared(
    const MrRequest& request, RegistrationCache::Probe probed) {
  // A miss (or a hit the hit path could not take, such as a racing insert): the cache looks
  // again unless the hit path just found nothing there, and registers; the caller gets a
  // hit's handle rather than a heap MemoryRegion.
  const iovec& segment = request.segments[0];
  const auto start = reinterpret_cast<uintptr_t>(segment.iov_base);
  const uint64_t length = segment.iov_len;
  CachedMr::reserve();  // may throw bad_alloc: nothing is taken yet
  const ThreadSlot slot = this_thread_slot();
  if (!mr_credits_.take(slot)) return Result<Registered>(mr_cnt_reached());
  // Open from before the NIC is called, as a MemoryRegion is: binding an event queue or
  // closing the domain meanwhile sees it.
  if (!open_shared(slot, length)) {
    mr_credits_.give(slot);
    return std::nullopt;  // an event queue was bound meanwhile
  }
  // Given back unless the handle is handed out, also when the cache throws (bad_alloc).
  struct GiveBack {
    Domain& domain;
    ThreadSlot slot;
    uint64_t length;
    bool armed = true;
    ~GiveBack() {
      if (!armed) return;
      domain.close_shared(slot, length);
      domain.mr_credits_.give(slot);
    }
  } give_back{*this, slot, length};
  // The hit path's answer holds only for the key it looked for (the same, for a request
  // shared_like_a_hit() accepts; checked, since a wrong "absent" would file a duplicate).
  const CacheKey key = cache_key(request);
  if (!(key == hit_key(request.access))) probed = RegistrationCache::Probe::not_done;
  Result<CacheHandle> handle = cache_->get(start, length, key, probed);
  if (!handle.ok()) return Result<Registered>(handle.status());
  give_back.armed = false;
  return Result<Registered>(Registered{
      nullptr, hand_out(*cache_, *handle, start, length, request.access, request.context, slot)});
}

void Domain::close_cached(CachedMr* mr) {
  const uint64_t length = mr->length();
  const ThreadSlot slot = this_thread_slot();
  mr->cache().put(mr->handle(), slot);
  CachedMr::release(mr);
  mr_credits_.give(slot);
  close_shared(slot, length);
}

MemoryRegion& Domain::promote(CachedMr& hit) {
  if (MemoryRegion* promoted = hit.promoted()) return *promoted;
  auto region = std::make_unique<MemoryRegion>(hit, /*promoted=*/true);
  if (hit.promote_to(region.get())) return *region.release();
  return *hit.promoted();  // another thread promoted it first
}

Status Domain::close_promoted(CachedMr* hit) {
  MemoryRegion* region = hit->promoted();
  HMR_RETURN_IF_ERROR(region->check_unused());
  Status released = region->release();  // the cache reference (or its own registration)
  // Its length now: a rereg may have changed it (MemoryRegion::apply_rereg counts that).
  const uint64_t length = region->request().counted_bytes();
  delete region;
  CachedMr::release(hit);
  const ThreadSlot slot = this_thread_slot();
  mr_credits_.give(slot);
  close_shared(slot, length);
  return closed_anyway(std::move(released));
}

int64_t Domain::open_mr_count() const {
  return static_cast<int64_t>(open_mrs_.load()) + hit_counters_.sum(kHitOpen);
}

}  // namespace hmr::core
