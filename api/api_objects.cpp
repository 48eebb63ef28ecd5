// C ABI: event queues, counters and endpoints.
#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "core/counter.h"
#include "core/domain.h"
#include "core/endpoint.h"
#include "core/event_queue.h"

using hmr::core::Counter;
using hmr::core::Domain;
using hmr::core::Endpoint;
using hmr::core::EventQueue;
using hmr::core::from_handle;

namespace {

// A NULL attribute means defaults; a given one is checked for size and for flags 0.
template <typename Attr>
hmr::Status check_optional_attr(const Attr* attr, const char* name) {
  if (attr == nullptr) return hmr::ok_status();
  auto copy = hmr::core::read_extensible(attr, sizeof(Attr), name);
  if (!copy.ok()) return copy.status();
  if constexpr (requires { copy->flags; }) {
    if (copy->flags != 0) return hmr::make_error(HMR_EBADFLAGS, "%s.flags must be 0", name);
  }
  return hmr::ok_status();
}

int rma(hmr_ep* handle, const hmr::core::RmaArguments& arguments) {
  Endpoint* endpoint = from_handle<Endpoint>(handle);
  if (endpoint == nullptr) return hmr::report_bad_handle(handle, "not an endpoint handle");
  return hmr::report(endpoint->rma(arguments));
}

}  // namespace

extern "C" {

HMR_API int hmr_eq_open(const hmr_eq_attr* attr, hmr_eq** eq) {
  return hmr::guarded([&] {
    if (eq == nullptr) return hmr::report_error(HMR_EINVAL, "eq output pointer is NULL");
    hmr::Status status = check_optional_attr(attr, "hmr_eq_attr");
    if (!status.ok()) return hmr::report(status);
    *eq = hmr::core::to_handle<hmr_eq>(new EventQueue());
    return 0;
  });
}

HMR_API int hmr_eq_close(hmr_eq* handle) {
  return hmr::guarded([&] {
    EventQueue* queue = from_handle<EventQueue>(handle);
    if (queue == nullptr) return hmr::close_bad_handle(handle, "not an event queue handle");
    if (queue->has_bound_domains()) {
      return hmr::report_error(HMR_EBUSY, "a domain is bound to this event queue; close it first");
    }
    queue->wake_waiters_for_close();  // a reader blocked in hmr_eq_sread returns -HMR_EBADF
    delete queue;
    return 0;
  });
}

HMR_API int hmr_eq_read(hmr_eq* handle, uint32_t* event, hmr_eq_entry* entry, uint64_t flags) {
  return hmr_eq_sread(handle, event, entry, 0, flags);
}

HMR_API int hmr_eq_sread(hmr_eq* handle, uint32_t* event, hmr_eq_entry* entry, int timeout_ms,
                         uint64_t flags) {
  return hmr::guarded([&] {
    EventQueue* queue = from_handle<EventQueue>(handle);
    if (queue == nullptr) return hmr::report_bad_handle(handle, "not an event queue handle");
    if (event == nullptr || entry == nullptr) {
      return hmr::report_error(HMR_EINVAL, "event and entry must not be NULL");
    }
    if (flags != 0) return hmr::report_error(HMR_EBADFLAGS, "event queue reads take flags 0");
    const int rc = timeout_ms == 0 ? queue->read(event, entry)
                                   : queue->wait_and_read(event, entry, timeout_ms);
    if (rc == -HMR_EAGAIN) return hmr::report_error(HMR_EAGAIN, "no event");
    if (rc == -HMR_ETIMEDOUT) return hmr::report_error(HMR_ETIMEDOUT, "no event in %d ms", timeout_ms);
    if (rc == -HMR_EBADF) {
      return hmr::report_error(HMR_EBADF, "the event queue was closed (hmr_eq_close) while this "
                               "call waited");
    }
    if (rc == -HMR_EAVAIL) {
      return hmr::report_error(HMR_EAVAIL, "an error entry is next: read it with hmr_eq_readerr");
    }
    return rc;
  });
}

HMR_API int hmr_eq_readerr(hmr_eq* handle, hmr_eq_err_entry* entry, uint64_t flags) {
  return hmr::guarded([&] {
    EventQueue* queue = from_handle<EventQueue>(handle);
    if (queue == nullptr) return hmr::report_bad_handle(handle, "not an event queue handle");
    if (entry == nullptr) return hmr::report_error(HMR_EINVAL, "entry must not be NULL");
    if (flags != 0) return hmr::report_error(HMR_EBADFLAGS, "hmr_eq_readerr takes flags 0");
    const int rc = queue->read_error(entry);
    if (rc < 0) return hmr::report_error(HMR_EAGAIN, "no error entry is next");
    return rc;
  });
}

HMR_API int hmr_cntr_open(hmr_domain* domain_handle, const hmr_cntr_attr* attr, hmr_cntr** cntr) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(domain_handle);
    if (domain == nullptr) return hmr::report_bad_handle(domain_handle, "not a domain handle");
    if (cntr == nullptr) return hmr::report_error(HMR_EINVAL, "cntr output pointer is NULL");
    hmr::Status status = check_optional_attr(attr, "hmr_cntr_attr");
    if (!status.ok()) return hmr::report(status);
    auto* counter = new Counter(*domain);
    domain->object_opened();
    *cntr = hmr::core::to_handle<hmr_cntr>(counter);
    return 0;
  });
}

HMR_API int hmr_cntr_close(hmr_cntr* handle) {
  return hmr::guarded([&] {
    Counter* counter = from_handle<Counter>(handle);
    if (counter == nullptr) return hmr::close_bad_handle(handle, "not a counter handle");
    if (counter->has_bound_mrs()) {
      return hmr::report_error(HMR_EBUSY, "MRs are bound to this counter; close them first");
    }
    counter->domain().object_closed();
    delete counter;
    return 0;
  });
}

HMR_API int hmr_cntr_read(hmr_cntr* handle, uint64_t* value) {
  return hmr::guarded([&] {
    Counter* counter = from_handle<Counter>(handle);
    if (counter == nullptr) return hmr::report_bad_handle(handle, "not a counter handle");
    if (value == nullptr) return hmr::report_error(HMR_EINVAL, "value must not be NULL");
    *value = counter->value();
    return 0;
  });
}

HMR_API int hmr_ep_open(hmr_domain* domain_handle, const hmr_ep_attr* attr, hmr_ep** ep) {
  return hmr::guarded([&] {
    Domain* domain = from_handle<Domain>(domain_handle);
    if (domain == nullptr) return hmr::report_bad_handle(domain_handle, "not a domain handle");
    if (ep == nullptr) return hmr::report_error(HMR_EINVAL, "ep output pointer is NULL");
    hmr::Status status = check_optional_attr(attr, "hmr_ep_attr");
    if (!status.ok()) return hmr::report(status);
    auto* endpoint = new Endpoint(*domain);
    domain->object_opened();
    *ep = hmr::core::to_handle<hmr_ep>(endpoint);
    return 0;
  });
}

HMR_API int hmr_ep_close(hmr_ep* handle) {
  return hmr::guarded([&] {
    Endpoint* endpoint = from_handle<Endpoint>(handle);
    if (endpoint == nullptr) return hmr::close_bad_handle(handle, "not an endpoint handle");
    hmr::Status status = endpoint->prepare_close();
    if (!status.ok()) return hmr::report(status);
    endpoint->domain().object_closed();
    delete endpoint;
    return 0;
  });
}

HMR_API int hmr_ep_connect(hmr_ep* handle, hmr_ep* peer_handle) {
  return hmr::guarded([&] {
    Endpoint* endpoint = from_handle<Endpoint>(handle);
    Endpoint* peer = from_handle<Endpoint>(peer_handle);
    if (endpoint == nullptr || peer == nullptr) {
      return hmr::report_bad_handle(endpoint == nullptr ? handle : peer_handle,
                                    "hmr_ep_connect needs two endpoint handles");
    }
    return hmr::report(Endpoint::connect(*endpoint, *peer));
  });
}

HMR_API int hmr_ep_write(hmr_ep* ep, const void* buf, size_t len, void* desc, uint64_t addr,
                         uint64_t key) {
  return hmr::guarded([&] {
    return rma(ep, {hmr::nic::RmaOp::write, const_cast<void*>(buf), len, desc, addr, key, 0, nullptr});
  });
}

HMR_API int hmr_ep_read(hmr_ep* ep, void* buf, size_t len, void* desc, uint64_t addr,
                        uint64_t key) {
  return hmr::guarded([&] {
    return rma(ep, {hmr::nic::RmaOp::read, buf, len, desc, addr, key, 0, nullptr});
  });
}

HMR_API int hmr_ep_fetch_add(hmr_ep* ep, uint64_t operand, uint64_t* result, uint64_t addr,
                             uint64_t key) {
  return hmr::guarded([&] {
    return rma(ep, {hmr::nic::RmaOp::fetch_add, nullptr, sizeof(uint64_t), nullptr, addr, key,
                    operand, result});
  });
}

}  // extern "C"
