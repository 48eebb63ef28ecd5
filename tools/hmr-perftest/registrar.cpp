#include "registrar.h"

#include <atomic>
#include <utility>

namespace hmr::perftest {
namespace {

// Requested keys, for providers that do not choose their own.  One counter for every
// registrar: the raw baseline and hmr register on one libfabric domain, where a requested key
// may be used only once; starting high keeps clear of the keys hmr picks for itself.
uint64_t next_requested_key() {
  static std::atomic<uint64_t> next{uint64_t{1} << 40};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool hmr_failed(std::string* why, const std::string& what, int rc) {
  if (why != nullptr) {
    *why = what + ": " + hmr_strerror(rc) + " (" + hmr_last_error() + ")";
  }
  return false;
}

}  // namespace

std::optional<Registrar> Registrar::open(Fabric& fabric, RegMode mode, bool dmabuf,
                                         std::string* why) {
  Registrar registrar(fabric, mode);
  registrar.mr_mode_ = fabric.mr_mode();
  registrar.dmabuf_ = dmabuf;
  if (mode == RegMode::raw) return registrar;

  hmr_domain_attr attr{};
  attr.size = sizeof attr;
  attr.nic = "ofi";
  attr.nic_handle = fabric.domain();  // hmr layers on the tool's own domain; never closes it
  // libfabric cannot be asked how a domain was opened, so the adapter is told.
  const std::string nic_options = "provider=" + fabric.provider_name() +
                                  ";mr_mode=" + std::to_string(fabric.mr_mode());
  attr.nic_options = nic_options.c_str();
  // The tool honours whatever the provider runs with, and also reads keys and descriptors
  // back from every registration, so hmr may choose keys (PROV_KEY) and check pages.
  attr.mr_mode = fabric.mr_mode() | FI_MR_PROV_KEY | FI_MR_LOCAL | FI_MR_ALLOCATED;
  attr.cache_monitor = mode == RegMode::per_iter ? "disabled" : nullptr;
  // Device memory the provider cannot reach goes through a host shadow, unless the user
  // insists on dma-buf.
  attr.flags = dmabuf ? 0 : HMR_DOMAIN_ALLOW_HMEM_COPY;
  const int rc = hmr_domain_open(&attr, &registrar.domain_);
  if (rc != 0) {
    hmr_failed(why, "hmr_domain_open on the '" + fabric.provider_name() + "' domain", rc);
    return std::nullopt;
  }
  return registrar;
}

Registrar::Registrar(Registrar&& other) noexcept
    : fabric_(other.fabric_),
      mode_(other.mode_),
      domain_(std::exchange(other.domain_, nullptr)),
      mr_mode_(other.mr_mode_),
      dmabuf_(other.dmabuf_) {}

Registrar::~Registrar() {
  if (domain_ != nullptr) hmr_domain_close(domain_);
}

std::optional<Registered> Registrar::reg(void* buf, size_t len, uint64_t access,
                                         std::string* why) {
  Registered out;
  out.local = buf;
  out.base = (mr_mode_ & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(buf) : 0;
  const uint64_t requested_key = next_requested_key();
  if (mode_ == RegMode::raw) {
    out.raw_mr.reset(fabric_->register_raw(buf, len, access, requested_key, why));
    if (out.raw_mr == nullptr) return std::nullopt;
    out.desc = fi_mr_desc(out.raw_mr.get());
    if (mr_mode_ & FI_MR_RAW) {
      size_t size = 0;
      (void)fi_mr_raw_attr(out.raw_mr.get(), &out.base, nullptr, &size, 0);
      out.raw_key.resize(size);
      if (fi_mr_raw_attr(out.raw_mr.get(), &out.base, out.raw_key.data(), &size, 0) != 0) {
        if (why != nullptr) *why = "fi_mr_raw_attr failed";  // (out gives the MR back)
        return std::nullopt;
      }
    } else {
      out.key = fi_mr_key(out.raw_mr.get());
    }
    return out;
  }
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain_, buf, len, access, 0, requested_key, 0, &mr, nullptr);
  out.mr.reset(mr);
  if (rc != 0) {
    hmr_failed(why, "hmr_mr_reg of " + std::to_string(len) + " bytes", rc);
    return std::nullopt;
  }
  hmr_mr_info info{};
  info.size = sizeof info;
  if (const int queried = hmr_mr_query(mr, &info); queried != 0) {
    hmr_failed(why, "hmr_mr_query", queried);
    return std::nullopt;
  }
  if (dmabuf_ && info.iface != HMR_HMEM_SYSTEM && info.path != HMR_MR_PATH_DMABUF) {
    if (why != nullptr) *why = "--dmabuf: hmr registered the device memory another way";
    return std::nullopt;
  }
  if (info.path == HMR_MR_PATH_HOST_SHADOW) {
    out.shadow = true;
    out.local = info.shadow;
    if (mr_mode_ & FI_MR_VIRT_ADDR) out.base = reinterpret_cast<uint64_t>(info.shadow);
  }
  out.desc = hmr_mr_desc(mr);
  if (mr_mode_ & FI_MR_RAW) {
    size_t size = 0;
    (void)hmr_mr_raw_attr(mr, &out.base, nullptr, &size, 0);
    out.raw_key.resize(size);
    const int raw = hmr_mr_raw_attr(mr, &out.base, out.raw_key.data(), &size, 0);
    if (raw != 0) {
      hmr_failed(why, "hmr_mr_raw_attr", raw);
      return std::nullopt;
    }
  } else {
    out.key = hmr_mr_key(mr);
  }
  return out;
}

bool Registrar::sync(const Registered& registered, size_t len, bool to_device, std::string* why) {
  if (!registered.shadow) return true;
  const int rc = hmr_mr_sync(registered.mr.get(), 0, len,
                             to_device ? HMR_SYNC_TO_DEVICE : HMR_SYNC_FROM_DEVICE);
  if (rc != 0) return hmr_failed(why, "hmr_mr_sync", rc);
  return true;
}

hmr_domain_stats Registrar::stats() const {
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  if (domain_ != nullptr) (void)hmr_domain_query_stats(domain_, &stats);
  return stats;
}

}  // namespace hmr::perftest
