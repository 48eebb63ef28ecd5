#include "endpoint.h"

#include "efa_endpoint_options.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

namespace hmr::nccl {
namespace {

bool failed(const Libfabric& libfabric, std::string* why, const char* call, int64_t rc) {
  if (why != nullptr) *why = std::string(call) + " failed: " + libfabric.describe(rc);
  return false;
}

}  // namespace

std::unique_ptr<Endpoint> Endpoint::open(const Libfabric& libfabric, fi_info* info,
                                         fid_domain* domain, std::string* why,
                                         size_t queue_depth) {
  std::unique_ptr<Endpoint> endpoint(new Endpoint(libfabric));
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = queue_depth;
  int rc = fi_cq_open(domain, &cq_attr, &endpoint->cq_, nullptr);
  if (rc != 0) return failed(libfabric, why, "fi_cq_open", rc), nullptr;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain, &av_attr, &endpoint->av_, nullptr)) != 0) {
    return failed(libfabric, why, "fi_av_open", rc), nullptr;
  }
  if ((rc = fi_endpoint(domain, info, &endpoint->ep_, nullptr)) != 0) {
    return failed(libfabric, why, "fi_endpoint", rc), nullptr;
  }
  if ((rc = fi_ep_bind(endpoint->ep_, &endpoint->cq_->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (rc = fi_ep_bind(endpoint->ep_, &endpoint->av_->fid, 0)) != 0) {
    return failed(libfabric, why, "fi_ep_bind", rc), nullptr;
  }
  if (is_efa_provider(info->fabric_attr != nullptr ? info->fabric_attr->prov_name : nullptr)) {
    // (An option the provider does not know is left unset: an older EFA provider has neither.)
    if (!apply_efa_endpoint_options(libfabric, endpoint->ep_, nullptr, why)) return nullptr;
  }
  if ((rc = fi_enable(endpoint->ep_)) != 0) return failed(libfabric, why, "fi_enable", rc), nullptr;
  std::vector<uint8_t> name(256);
  size_t length = name.size();
  rc = fi_getname(&endpoint->ep_->fid, name.data(), &length);
  if (rc == -FI_ETOOSMALL) {
    name.resize(length);
    rc = fi_getname(&endpoint->ep_->fid, name.data(), &length);
  }
  if (rc != 0) return failed(libfabric, why, "fi_getname", rc), nullptr;
  name.resize(length);
  endpoint->address_ = std::move(name);
  return endpoint;
}

Endpoint::~Endpoint() {
  // The endpoint before what it is bound to.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
}

bool Endpoint::insert(std::span<const uint8_t> address, fi_addr_t* peer, std::string* why) {
  fi_addr_t inserted = FI_ADDR_UNSPEC;
  const int rc = fi_av_insert(av_, address.data(), 1, &inserted, 0, nullptr);
  if (rc != 1) return failed(*libfabric_, why, "fi_av_insert of the peer's address", rc < 0 ? rc : -FI_EINVAL);
  *peer = inserted;
  addresses_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Endpoint::remove(fi_addr_t peer) {
  if (fi_av_remove(av_, &peer, 1, 0) == 0) addresses_.fetch_sub(1, std::memory_order_relaxed);
}

ssize_t Endpoint::post_receive(void* buf, size_t len, void* desc, OperationContext* context) {
  return fi_recv(ep_, buf, len, desc, FI_ADDR_UNSPEC, context);
}

ssize_t Endpoint::send(const void* buf, size_t len, void* desc, fi_addr_t peer,
                       OperationContext* context) {
  return fi_send(ep_, buf, len, desc, peer, context);
}

ssize_t Endpoint::send_with_data(const void* buf, size_t len, void* desc, uint32_t data,
                                 fi_addr_t peer, OperationContext* context) {
  return fi_senddata(ep_, buf, len, desc, data, peer, context);
}

ssize_t Endpoint::write(const void* buf, size_t len, void* desc, fi_addr_t peer,
                        uint64_t remote_addr, uint64_t key, OperationContext* context) {
  return fi_write(ep_, buf, len, desc, peer, remote_addr, key, context);
}

ssize_t Endpoint::write_with_data(const void* buf, size_t len, void* desc, uint32_t data,
                                  fi_addr_t peer, uint64_t remote_addr, uint64_t key,
                                  OperationContext* context) {
  return fi_writedata(ep_, buf, len, desc, data, peer, remote_addr, key, context);
}

ssize_t Endpoint::read(void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t remote_addr,
                       uint64_t key, OperationContext* context) {
  return fi_read(ep_, buf, len, desc, peer, remote_addr, key, context);
}

int Endpoint::poll(std::span<Completion> out, CompletionError* error) {
  fi_cq_data_entry entries[16];
  const size_t want = out.size() < 16 ? out.size() : 16;
  const ssize_t n = fi_cq_read(cq_, entries, want);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      out[static_cast<size_t>(i)] = Completion{static_cast<OperationContext*>(entries[i].op_context),
                                               entries[i].flags, entries[i].len, entries[i].data};
    }
    return static_cast<int>(n);
  }
  if (n == 0 || n == -FI_EAGAIN) return 0;  // (0: a read of none, see poll's comment)
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry entry{};
    if (fi_cq_readerr(cq_, &entry, 0) < 0) {
      error->reason = "fi_cq_readerr failed";
      error->error = FI_EIO;
      return -1;
    }
    error->context = static_cast<OperationContext*>(entry.op_context);
    error->error = entry.err;
    error->reason = std::string(libfabric_->strerror(entry.err)) + " (" +
                    fi_cq_strerror(cq_, entry.prov_errno, entry.err_data, nullptr, 0) + ")";
    return -1;
  }
  error->context = nullptr;
  error->error = static_cast<int>(-n);
  error->reason = "fi_cq_read failed: " + libfabric_->describe(n);
  return -1;
}

}  // namespace hmr::nccl
