// The cache hit path of hmr_mr_reg: one pass from the C ABI to the cache and back.
//
// It serves exactly the requests whose answer is "the cached registration of this host range":
// one segment, no flags, no requested key (provider keys), no endpoint binding, no event
// queue, no mr_cnt limit, host memory the registry can vouch for without asking a runtime.
// Everything else — and every miss — returns nullptr and takes the full path, which also
// reports every error with its reason.  On the way: no domain mutex, no allocation (handles
// come from a per-thread free list), no condition variable, no vector, no virtual call;
// counters are per thread.
#include "cache/registration_cache.h"
#include "core/cached_mr.h"
#include "core/domain.h"
#include "hmem/hmem_registry.h"
#include "registration/mr_request.h"

namespace hmr::core {

void Domain::enable_hit_path() {
  MrRequest host;
  host.iface = HMR_HMEM_SYSTEM;
  hit_key_ = cache_key(host);
  // The same conditions as cacheable() for a plain host request, decided once; plus no
  // mr_cnt (a limit needs one shared count) — see register_memory() for the full rules.
  hit_path_ = cache_ != nullptr && has_mode(HMR_MR_PROV_KEY) && !has_mode(HMR_MR_ENDPOINT) &&
              mr_cnt_ == 0;
}

CachedMr* Domain::try_cached_hit(const void* buf, size_t len, uint64_t access, uint64_t offset,
                                 void* context) {
  if (!hit_path_ || async_bound_.load(std::memory_order_relaxed)) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(buf);
  // What validate_mr_request() would refuse is the full path's to refuse, with its reason.
  if (buf == nullptr || len == 0 || start + len < start || len > rules_.max_mr_size ||
      access == 0 || (access & ~kKnownAccess) != 0 || offset != 0) {
    return nullptr;
  }
  // Host memory for certain only while no device runtime is loaded; otherwise classifying
  // means asking the runtime, which is the full path's business.
  if (!hmem::Registry::global().host_without_asking()) return nullptr;
  CacheKey key = hit_key_;
  key.access = static_cast<uint32_t>(access);
  const CacheHandle handle = cache_->find(start, len, key);
  if (!handle) return nullptr;
  hit_counters_.add(kHitRegistrations, 1);
  hit_counters_.add(kHitOpen, 1);
  hit_counters_.add(kHitBytes, static_cast<int64_t>(len));
  return CachedMr::make(*this, *cache_, handle, start, len, access, context, raw_keys());
}

void Domain::close_cached(CachedMr* mr) {
  const uint64_t length = mr->length();
  mr->cache().put(mr->handle());
  CachedMr::release(mr);
  hit_counters_.add(kHitOpen, -1);
  hit_counters_.add(kHitBytes, -static_cast<int64_t>(length));
}

int64_t Domain::open_mr_count() const {
  return static_cast<int64_t>(open_mrs_.load()) + hit_counters_.sum(kHitOpen);
}

}  // namespace hmr::core
