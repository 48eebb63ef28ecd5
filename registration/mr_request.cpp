#include "registration/mr_request.h"

#include "hmem/hmem_registry.h"
#include "util/enum_bits.h"

namespace hmr::core {
namespace {

using ull = unsigned long long;

bool is_implicit_odp(const iovec* iov, size_t count, uint64_t flags) {
  return (flags & HMR_MR_ODP) != 0 && count == 1 && iov[0].iov_base == nullptr &&
         iov[0].iov_len == SIZE_MAX;
}

Status validate_segments(const hmr_mr_attr& attr, uint64_t flags, const DomainRules& rules,
                         MrRequest& request) {
  if (attr.mr_iov != nullptr && is_implicit_odp(attr.mr_iov, attr.iov_count, flags)) {
    // The whole address space: nothing to check against sizes; the NIC maps pages on demand.
    if (!(rules.mr_mode & HMR_MR_VIRT_ADDR)) {
      return make_error(HMR_EINVAL, "an implicit ODP registration is addressed by virtual "
                                    "address: the domain needs HMR_MR_VIRT_ADDR");
    }
    request.segments.assign(attr.mr_iov, attr.mr_iov + 1);
    return ok_status();
  }
  HMR_RETURN_IF_ERROR(validate_segments(attr.mr_iov, attr.iov_count, rules));
  request.segments.assign(attr.mr_iov, attr.mr_iov + attr.iov_count);
  return ok_status();
}

Status validate_dmabuf(const hmr_mr_attr& attr, const DomainRules& rules, MrRequest& request) {
  if (attr.dmabuf == nullptr) {
    return make_error(HMR_EINVAL, "HMR_MR_DMABUF is set but attr->dmabuf is NULL");
  }
  if (attr.mr_iov != nullptr || attr.iov_count != 0) {
    return make_error(HMR_EINVAL, "HMR_MR_DMABUF registers attr->dmabuf; leave mr_iov empty");
  }
  const hmr_mr_dmabuf& dmabuf = *attr.dmabuf;
  if (dmabuf.fd < 0) return make_error(HMR_EBADF, "dma-buf fd %d is not a descriptor", dmabuf.fd);
  if (dmabuf.len == 0) return make_error(HMR_EINVAL, "dma-buf length is 0");
  if (dmabuf.offset + dmabuf.len < dmabuf.offset ||
      reinterpret_cast<uintptr_t>(dmabuf.base_addr) + dmabuf.len <
          reinterpret_cast<uintptr_t>(dmabuf.base_addr)) {
    return make_error(HMR_EINVAL, "dma-buf offset %llu + length %zu overflows",
                      static_cast<ull>(dmabuf.offset), dmabuf.len);
  }
  if (dmabuf.len > rules.max_mr_size) {
    return make_error(HMR_EINVAL, "dma-buf of %zu bytes exceeds the NIC's max MR size %llu",
                      dmabuf.len, static_cast<ull>(rules.max_mr_size));
  }
  request.dmabuf = dmabuf;
  return ok_status();
}

Status validate_flags(uint64_t flags, int iface) {
  if ((flags & HMR_MR_ODP) && (flags & (HMR_MR_DMABUF | HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC))) {
    return make_error(HMR_EBADFLAGS, "HMR_MR_ODP is for host memory registered by address, not "
                                     "with dma-buf or device-memory flags");
  }
  if (flags & ~kKnownRegistrationFlags) {
    return make_error(HMR_EBADFLAGS, "unknown registration flags %#llx",
                      static_cast<ull>(flags & ~kKnownRegistrationFlags));
  }
  if ((flags & HMR_HMEM_DEVICE_ONLY) && (flags & HMR_HMEM_HOST_ALLOC)) {
    return make_error(HMR_EBADFLAGS,
                      "HMR_HMEM_DEVICE_ONLY and HMR_HMEM_HOST_ALLOC contradict each other");
  }
  if (iface == HMR_HMEM_SYSTEM && (flags & (HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC))) {
    return make_error(HMR_EBADFLAGS, "%s describes device-runtime memory, but iface is SYSTEM",
                      (flags & HMR_HMEM_DEVICE_ONLY) ? "HMR_HMEM_DEVICE_ONLY"
                                                      : "HMR_HMEM_HOST_ALLOC");
  }
  return ok_status();
}

Status validate_keys(const hmr_mr_attr& attr, uint64_t flags, const DomainRules& rules,
                     MrRequest& request) {
  if (attr.auth_key_size != 0 && attr.auth_key == nullptr) {
    return make_error(HMR_EINVAL, "auth_key_size is %zu but auth_key is NULL", attr.auth_key_size);
  }
  if ((flags & HMR_AUTH_KEY) && attr.auth_key_size == 0) {
    return make_error(HMR_EINVAL, "HMR_AUTH_KEY is set but no auth_key is given");
  }
  if (attr.auth_key_size != 0 && !rules.nic_auth_keys) {
    return make_error(HMR_EOPNOTSUPP, "this NIC has no authorization keys");
  }
  if (rules.mr_mode & HMR_MR_PROV_KEY) return ok_status();  // requested_key is ignored
  if (rules.key_size < 8 && (attr.requested_key >> (8 * rules.key_size)) != 0) {
    return make_error(HMR_EKEYREJECTED, "requested key %#llx does not fit mr_key_size %zu bytes",
                      static_cast<ull>(attr.requested_key), rules.key_size);
  }
  // ~0 is HMR_KEY_NOTAVAIL (FI_KEY_NOTAVAIL): hmr_mr_key could not tell it from "no key", and
  // the ofi adapter treats a provider answering it as having given none.
  if (attr.requested_key == HMR_KEY_NOTAVAIL) {
    return make_error(HMR_EKEYREJECTED, "requested key %#llx is HMR_KEY_NOTAVAIL, which names no "
                      "key: request another", static_cast<ull>(attr.requested_key));
  }
  request.requested_key = attr.requested_key;
  return ok_status();
}

}  // namespace

Status validate_segments(const iovec* iov, size_t count, const DomainRules& rules) {
  if (iov == nullptr || count == 0) {
    return make_error(HMR_EINVAL, "no memory to register: mr_iov is %s and iov_count is %zu",
                      iov == nullptr ? "NULL" : "set", count);
  }
  if (count > rules.iov_limit) {
    return make_error(HMR_EINVAL, "iov_count %zu exceeds the domain's mr_iov_limit %zu", count,
                      rules.iov_limit);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const iovec& segment = iov[i];
    const auto start = reinterpret_cast<uintptr_t>(segment.iov_base);
    // Zero bytes are a registration as in libfabric (docs/semantics.md, "Zero bytes and no
    // access"), at any address; bytes at NULL never are memory.
    if (segment.iov_base == nullptr && segment.iov_len != 0) {
      return make_error(HMR_EINVAL, "segment %zu has a NULL address and %zu bytes", i,
                        segment.iov_len);
    }
    if (start + segment.iov_len < start) {
      return make_error(HMR_EINVAL, "segment %zu [%p, +%zu) wraps the address space", i,
                        segment.iov_base, segment.iov_len);
    }
    if (__builtin_add_overflow(total, segment.iov_len, &total)) {
      return make_error(HMR_EINVAL, "the segments' lengths add up to more than 2^64 bytes");
    }
  }
  if (total > rules.max_mr_size) {
    return make_error(HMR_EINVAL, "registration of %llu bytes exceeds the NIC's max MR size %llu",
                      static_cast<ull>(total), static_cast<ull>(rules.max_mr_size));
  }
  return ok_status();
}

bool MrRequest::implicit_odp() const {
  return !segments.empty() && is_implicit_odp(segments.data(), segments.size(), flags);
}

uint64_t MrRequest::length() const {
  if (dmabuf) return dmabuf->len;
  uint64_t total = 0;
  for (const iovec& segment : segments) total += segment.iov_len;
  return total;
}

Result<MrRequest> validate_mr_request(const hmr_mr_attr& attr, uint64_t flags,
                                      const DomainRules& rules) {
  MrRequest request;
  const int iface = enum_bits(attr.iface);
  HMR_RETURN_IF_ERROR(validate_flags(flags, iface));
  if (flags & HMR_MR_DMABUF) {
    HMR_RETURN_IF_ERROR(validate_dmabuf(attr, rules, request));
  } else {
    HMR_RETURN_IF_ERROR(validate_segments(attr, flags, rules, request));
  }
  // Access 0 is a registration as in libfabric (fi_mr(3): access is an OR of the flags, none
  // forbidden): no peer may reach it, and local use is what the NIC's enforcement allows.
  if (attr.access & ~kKnownAccess) {
    return make_error(HMR_EINVAL, "unknown access bits %#llx",
                      static_cast<ull>(attr.access & ~kKnownAccess));
  }
  if (attr.offset != 0) {
    return make_error(HMR_EINVAL, "offset is %llu; fi_mr(3) reserves it and it must be 0",
                      static_cast<ull>(attr.offset));
  }
  HMR_RETURN_IF_ERROR(validate_keys(attr, flags, rules, request));
  if (attr.page_size != 0 &&
      (attr.page_size < 4096 || (attr.page_size & (attr.page_size - 1)) != 0)) {
    return make_error(HMR_EINVAL, "page_size %zu is not a power of two >= 4096", attr.page_size);
  }
  // The declared iface/device's syntax; whether its runtime serves the memory is checked when
  // the memory is resolved (core/memory_resolution.h), after every argument error.
  HMR_RETURN_IF_ERROR(hmem::check_device_syntax(iface, attr.device.reserved));
  request.access = attr.access;
  request.flags = flags & ~HMR_MR_REPORTED_BASE;  // how peers address it: hmr's, not the NIC's
  request.reported_base = (flags & HMR_MR_REPORTED_BASE) != 0;
  request.context = attr.context;
  request.iface = static_cast<hmr_hmem_iface>(iface);
  request.device = attr.device.reserved;
  request.hmem_data = attr.hmem_data;
  request.page_size = attr.page_size;
  return request;
}

}  // namespace hmr::core
