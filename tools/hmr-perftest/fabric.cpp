#include "fabric.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <utility>

#include "peer_address.h"

namespace hmr::perftest {
namespace {

// The newest API this tool asks for: Debian 12's libfabric 1.17 rejects anything newer.
constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

bool failed(std::string* why, const std::string& what, int code) {
  if (why != nullptr) *why = what + ": " + fi_strerror(code < 0 ? -code : code);
  return false;
}

}  // namespace

std::optional<Fabric> Fabric::open(const std::string& provider, std::string* why) {
  StuckCallWatchdog::prepare();  // before the provider installs its own SIGTERM handler
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) {
    failed(why, "fi_allocinfo", FI_ENOMEM);
    return std::nullopt;
  }
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->ep_attr->type = FI_EP_RDM;
  // Everything a careful application can honour; the provider keeps what it needs.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                FI_MR_PROV_KEY | FI_MR_RAW;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  // A completion must mean the bytes are in the target's memory, as an RDMA write's does on
  // InfiniBand: the run's end-of-test check, and honest bandwidth, depend on it.
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // fi_freeinfo frees it

  Fabric fabric;
  int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &fabric.info_);
  fi_freeinfo(hints);
  if (rc != 0) {
    failed(why, "fi_getinfo for provider '" + provider + "' (RDM endpoints with RMA)", rc);
    // What to do about it: which names work here is what hmr-info's first screen says.
    if (why != nullptr) {
      *why += "; libfabric has no such provider here, or it offers no RMA on RDM endpoints "
              "(`hmr-info` says which names work, e.g. tcp, shm)";
    }
    return std::nullopt;
  }
  if ((rc = fi_fabric(fabric.info_->fabric_attr, &fabric.fabric_, nullptr)) != 0) {
    failed(why, "fi_fabric", rc);
    return std::nullopt;
  }
  if ((rc = fi_domain(fabric.fabric_, fabric.info_, &fabric.domain_, nullptr)) != 0) {
    failed(why, "fi_domain", rc);
    return std::nullopt;
  }
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = 256;
  if ((rc = fi_cq_open(fabric.domain_, &cq_attr, &fabric.cq_, nullptr)) != 0) {
    failed(why, "fi_cq_open", rc);
    return std::nullopt;
  }
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(fabric.domain_, &av_attr, &fabric.av_, nullptr)) != 0) {
    failed(why, "fi_av_open", rc);
    return std::nullopt;
  }
  if ((rc = fi_endpoint(fabric.domain_, fabric.info_, &fabric.ep_, nullptr)) != 0) {
    failed(why, "fi_endpoint", rc);
    return std::nullopt;
  }
  if ((rc = fi_ep_bind(fabric.ep_, &fabric.cq_->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (rc = fi_ep_bind(fabric.ep_, &fabric.av_->fid, 0)) != 0) {
    failed(why, "fi_ep_bind", rc);
    return std::nullopt;
  }
  if ((rc = fi_enable(fabric.ep_)) != 0) {
    failed(why, "fi_enable", rc);
    return std::nullopt;
  }
  return fabric;
}

Fabric::Fabric(Fabric&& other) noexcept
    : info_(std::exchange(other.info_, nullptr)),
      fabric_(std::exchange(other.fabric_, nullptr)),
      domain_(std::exchange(other.domain_, nullptr)),
      ep_(std::exchange(other.ep_, nullptr)),
      cq_(std::exchange(other.cq_, nullptr)),
      av_(std::exchange(other.av_, nullptr)),
      peer_(other.peer_),
      completed_(other.completed_),
      watchdog_(std::move(other.watchdog_)) {}

Fabric::~Fabric() { close_all(); }

void Fabric::close_all() {
  // Endpoint before what it is bound to; domain before the fabric.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
  ep_ = nullptr, av_ = nullptr, cq_ = nullptr, domain_ = nullptr, fabric_ = nullptr;
  info_ = nullptr;
}

uint64_t Fabric::mr_mode() const { return static_cast<uint64_t>(info_->domain_attr->mr_mode); }
size_t Fabric::mr_key_size() const { return info_->domain_attr->mr_key_size; }
std::string Fabric::provider_name() const { return info_->fabric_attr->prov_name; }

std::string Fabric::fabric_version() const {
  const uint32_t version = fi_version();
  return std::to_string(FI_MAJOR(version)) + "." + std::to_string(FI_MINOR(version));
}

std::vector<uint8_t> Fabric::address() const {
  std::vector<uint8_t> name(256);
  size_t length = name.size();
  if (fi_getname(&ep_->fid, name.data(), &length) == -FI_ETOOSMALL) {
    name.resize(length);
    if (fi_getname(&ep_->fid, name.data(), &length) != 0) return {};
  }
  name.resize(length);
  return name;
}

bool Fabric::insert_peer(const std::vector<uint8_t>& address, std::string* why) {
  // fi_av_insert takes no length: what the provider will read is checked first.
  if (!acceptable_peer_address(info_->addr_format, this->address(), address, why)) return false;
  const int inserted = fi_av_insert(av_, address.data(), 1, &peer_, 0, nullptr);
  if (inserted != 1) return failed(why, "fi_av_insert of the peer's address", inserted < 0 ? inserted : FI_EINVAL);
  return true;
}

void Fabric::watch_calls(int timeout_ms, const char* role) {
  watchdog_ = std::make_unique<StuckCallWatchdog>(std::chrono::milliseconds(timeout_ms), role);
}

void Fabric::watch_peer(int fd) {
  if (watchdog_) watchdog_->watch_peer(fd);
}

bool Fabric::post(bool write, void* buf, size_t len, void* desc, uint64_t remote_addr,
                  uint64_t key, void* context, std::vector<void*>* done, PeerWatch& watch,
                  std::string* why) {
  const char* call = write ? "fi_write" : "fi_read";
  const char* refused = write ? "fi_write not accepted (EAGAIN)" : "fi_read not accepted (EAGAIN)";
  for (;;) {
    if (watchdog_) watchdog_->entering();
    const ssize_t rc = write ? fi_write(ep_, buf, len, desc, peer_, remote_addr, key, context)
                             : fi_read(ep_, buf, len, desc, peer_, remote_addr, key, context);
    if (watchdog_) watchdog_->left();
    if (rc == 0) {
      watch.progressed();
      return true;
    }
    if (rc != -FI_EAGAIN) return failed(why, call, static_cast<int>(rc));
    // The queue is full, or the provider is still reaching the peer: progress and retry.
    if (!poll_watched(done, watch, refused, why)) return false;
  }
}

bool Fabric::poll_watched(std::vector<void*>* done, PeerWatch& watch, const char* waiting,
                          std::string* why) {
  const int completed = poll(done, why);
  if (completed < 0) return false;
  if (completed > 0) watch.progressed();
  if (watch.fine(why)) return true;
  if (why != nullptr) *why = std::string(waiting) + ": " + *why;
  return false;
}

bool Fabric::post_write(const void* buf, size_t len, void* desc, uint64_t remote_addr,
                        uint64_t key, void* context, std::vector<void*>* done, PeerWatch& watch,
                        std::string* why) {
  return post(true, const_cast<void*>(buf), len, desc, remote_addr, key, context, done, watch,
              why);
}

bool Fabric::post_read(void* buf, size_t len, void* desc, uint64_t remote_addr, uint64_t key,
                       void* context, std::vector<void*>* done, PeerWatch& watch,
                       std::string* why) {
  return post(false, buf, len, desc, remote_addr, key, context, done, watch, why);
}

int Fabric::poll(std::vector<void*>* done, std::string* why) {
  fi_cq_entry entries[64];
  if (watchdog_) watchdog_->entering();
  const ssize_t n = fi_cq_read(cq_, entries, 64);
  if (watchdog_) watchdog_->left();
  if (n > 0) {
    if (done != nullptr) {
      for (ssize_t i = 0; i < n; ++i) done->push_back(entries[i].op_context);
    } else {
      completed_ += static_cast<uint64_t>(n);  // counted for wait()
    }
    return static_cast<int>(n);
  }
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry error{};
    fi_cq_readerr(cq_, &error, 0);
    failed(why, std::string("RMA completion error (") +
                    fi_cq_strerror(cq_, error.prov_errno, error.err_data, nullptr, 0) + ")",
           error.err);
    return -1;
  }
  failed(why, "fi_cq_read", static_cast<int>(n));
  return -1;
}

bool Fabric::wait(uint64_t count, PeerWatch& watch, std::string* why) {
  while (completed_ < count) {
    if (!poll_watched(nullptr, watch, "waiting for a completion", why)) return false;
  }
  completed_ -= count;
  return true;
}

fid_mr* Fabric::register_raw(void* buf, size_t len, uint64_t access, uint64_t requested_key,
                             std::string* why) {
  fid_mr* mr = nullptr;
  const int rc = fi_mr_reg(domain_, buf, len, access, 0, requested_key, 0, &mr, nullptr);
  if (rc != 0) {
    failed(why, "fi_mr_reg", rc);
    return nullptr;
  }
  return mr;
}

void Fabric::close_mr(fid_mr* mr) {
  if (mr != nullptr) fi_close(&mr->fid);
}

bool Fabric::map_raw(uint64_t base, const std::vector<uint8_t>& raw, uint64_t* key,
                     std::string* why) {
  const int rc = fi_mr_map_raw(domain_, base, const_cast<uint8_t*>(raw.data()), raw.size(), key, 0);
  if (rc != 0) return failed(why, "fi_mr_map_raw", rc);
  return true;
}

}  // namespace hmr::perftest
