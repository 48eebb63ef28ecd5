// C ABI: domains.
#include <cstddef>

#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "core/domain.h"
#include "core/event_queue.h"

using hmr::core::Domain;
using hmr::core::EventQueue;
using hmr::core::from_handle;

extern "C" {

HMR_API int hmr_domain_open(hmr_domain_attr* attr, hmr_domain** domain) {
  return hmr::guarded([&] {
    if (domain == nullptr) return hmr::report_error(HMR_EINVAL, "domain output pointer is NULL");
    // Callers built before nic_handle existed pass the first version's size, which ends
    // where nic_handle starts, and those built before flags existed pass the size that ends
    // where flags starts; any other size short of today's is a mistake.
    constexpr size_t kFirstVersionSize = offsetof(hmr_domain_attr, nic_handle);
    constexpr size_t kSecondVersionSize = offsetof(hmr_domain_attr, flags);
    if (attr != nullptr && attr->size > kFirstVersionSize && attr->size != kSecondVersionSize &&
        attr->size < sizeof(hmr_domain_attr)) {
      return hmr::report_error(HMR_EINVAL,
                               "hmr_domain_attr.size is %zu; set it to sizeof(struct "
                               "hmr_domain_attr) (%zu)", attr->size, sizeof(hmr_domain_attr));
    }
    auto request = hmr::core::read_extensible(attr, kFirstVersionSize, "hmr_domain_attr");
    if (!request.ok()) return hmr::report(request.status());
    hmr_domain_attr negotiated{};
    auto opened = Domain::open(*request, &negotiated);
    if (!opened.ok()) return hmr::report(opened.status());
    hmr::core::write_extensible(attr, negotiated);
    *domain = hmr::core::to_handle<hmr_domain>(opened->release());
    return 0;
  });
}

HMR_API int hmr_domain_close(hmr_domain* handle) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::close_bad_handle(handle, "not a domain handle");
    hmr::Status status = domain->prepare_close();
    if (!status.ok()) return hmr::report(status);
    const hmr::Status left_open = domain->close_nic();  // reported, but the domain is closed
    delete domain;
    return left_open.ok() ? 0 : hmr::report(left_open);
  });
}

HMR_API int hmr_domain_bind(hmr_domain* handle, hmr_fid* eq_fid, uint64_t flags) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    EventQueue* queue = from_handle<EventQueue>(eq_fid);
    if (queue == nullptr) {
      return hmr::report_bad_handle(eq_fid, "a domain binds an event queue (hmr_eq_fid(eq))");
    }
    return hmr::report(domain->bind_event_queue(*queue, flags));
  });
}

HMR_API int hmr_domain_query_stats(hmr_domain* handle, hmr_domain_stats* stats) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    // The first version ended before deregistration_ns.
    constexpr size_t kFirstVersionSize = offsetof(hmr_domain_stats, deregistration_ns);
    auto checked = hmr::core::read_extensible(stats, kFirstVersionSize, "hmr_domain_stats");
    if (!checked.ok()) return hmr::report(checked.status());
    hmr::core::write_extensible(stats, domain->statistics());
    return 0;
  });
}

HMR_API int hmr_domain_cache_flush(hmr_domain* handle) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(handle);
    if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    domain->flush_cache();
    return 0;
  });
}

}  // extern "C"
