#include "device.h"

#include "../abi/nccl_net_common.h"
#include "../wire/fnv1a.h"
#include "../wire/limits.h"
#include "nic_selection.h"
#include "nic_sysfs.h"
#include "pointer_support.h"
#include "shared_endpoint.h"

namespace hmr::nccl {
namespace {

// Link speeds for NICs sysfs does not describe: shm is memory bandwidth, the rest a guess
// NCCL only uses to rank devices.
constexpr int kShmSpeedMbps = 400000;
constexpr int kUnknownSpeedMbps = 10000;

}  // namespace

std::unique_ptr<Device> Device::open(const Libfabric& libfabric, InfoPtr info,
                                     const std::string& provider, const Settings& settings,
                                     std::string* why) {
  std::unique_ptr<Device> device(new Device(libfabric, std::move(info)));
  device->provider_ = provider;
  device->settings_ = settings;
  fi_info* fi = device->info_.get();
  int rc = libfabric.fabric(fi->fabric_attr, &device->fabric_, nullptr);
  if (rc != 0) {
    *why = "fi_fabric of " + provider + " failed: " + libfabric.describe(rc);
    return nullptr;
  }
  if ((rc = fi_domain(device->fabric_, fi, &device->domain_, nullptr)) != 0) {
    *why = "fi_domain of " + provider + " NIC " + fi->domain_attr->name + " failed: " +
           libfabric.describe(rc);
    return nullptr;
  }
  if (!device->open_registrations(why)) return nullptr;

  DeviceProperties& p = device->properties_;
  p.name = fi->domain_attr->name;
  const NicSysfs sysfs = read_nic_sysfs(*fi);
  p.pci_path = sysfs.pci_path;
  p.guid = sysfs.guid.value_or(derived_nic_guid(provider, p.name, sysfs.mac, host_identity()));
  p.speed_mbps = sysfs.speed_mbps.value_or(provider == "shm" ? kShmSpeedMbps : kUnknownSpeedMbps);
  p.ptr_support = device->query_ptr_support();
  p.max_message = fi->ep_attr->max_msg_size < kMaxMessageSize ? fi->ep_attr->max_msg_size
                                                              : kMaxMessageSize;
  // Every recv comm opens an endpoint of its own (and a CQ and an AV), the send and listen
  // comms one between them: as many as the domain supports endpoints (fi_domain(3) ep_cnt; 0:
  // no limit).  Not cq_cnt, which fi_domain(3) calls the optimal number, not a maximum (tcp
  // reports 256).
  const size_t endpoints = fi->domain_attr->ep_cnt;
  p.max_comms = static_cast<int>(endpoints != 0 && endpoints < 65536 ? endpoints : 65536);
  return device;
}

bool Device::open_registrations(std::string* why) {
  fi_info* fi = info_.get();
  const uint64_t mr_mode = static_cast<uint64_t>(fi->domain_attr->mr_mode);
  std::string options = "provider=" + provider_ + ";mr_mode=" + std::to_string(mr_mode);
  if (fi->caps & FI_HMEM) options += ";hmem=1";
  hmr_domain_attr attr{};
  attr.size = sizeof attr;
  attr.nic = "ofi";
  attr.nic_options = options.c_str();
  attr.nic_handle = domain_;  // hmr registers in this libfabric domain and never closes it
  // What the plugin honours: provider keys (hmr chooses them where the provider takes
  // requested keys, which is what lets its cache share registrations), descriptors for local
  // buffers, only mapped memory.  Not HMR_MR_HMEM: hmr detects what memory is.
  attr.mr_mode = (mr_mode & ~static_cast<uint64_t>(FI_MR_HMEM)) | HMR_MR_PROV_KEY | HMR_MR_LOCAL |
                 HMR_MR_ALLOCATED;
  attr.threading = HMR_THREAD_SAFE;
  const int rc = hmr_domain_open(&attr, &hmr_);
  if (rc != 0) {
    *why = "hmr_domain_open on " + provider_ + " NIC " + fi->domain_attr->name + ": " +
           hmr_strerror(rc) + " (" + hmr_last_error() + ")";
    return false;
  }
  return true;
}

int Device::query_ptr_support() const {
  hmr_md_attr md{};
  md.size = sizeof md;
  if (hmr_md_query(hmr_, &md) != 0) return NCCL_PTR_HOST;
  // GPU memory only where the NIC reaches it itself: a dma-buf or peer-direct.  No host
  // shadow: NCCL stages through host memory on its own when the plugin says host only.
  return pointer_support(md, nccl_dmabuf_enabled());
}

std::unique_ptr<SharedEndpoint::Port> Device::attach_comm(std::string* why) {
  std::lock_guard hold(shared_mutex_);
  release_unused_locked();
  if (shared_endpoints_.empty() || shared_endpoints_.back()->stalled()) {
    std::unique_ptr<SharedEndpoint> fresh = SharedEndpoint::open(*this, why);
    if (!fresh) return nullptr;
    shared_endpoints_.push_back(std::move(fresh));
  }
  return shared_endpoints_.back()->attach();
}

void Device::retire_comm(std::unique_ptr<SharedEndpoint::Tenant> tenant) {
  SharedEndpoint& shared = tenant->port().endpoint();
  shared.settle(tenant->port());  // (without the lock: other comms connect and close meanwhile)
  std::lock_guard hold(shared_mutex_);
  shared.retire(std::move(tenant));
  release_unused_locked();
}

void Device::release_unused_shared_endpoints() {
  std::lock_guard hold(shared_mutex_);
  release_unused_locked();
}

void Device::release_unused_locked() {
  // An endpoint no open comm uses is closed, even with retired comms' operations in flight:
  // closing the provider's endpoint ends them (nothing else would progress them), and then
  // they are freed.
  std::erase_if(shared_endpoints_, [](const std::unique_ptr<SharedEndpoint>& e) {
    e->sweep();
    return e->open_ports() == 0;
  });
}

Device::SharedEndpoints Device::shared_endpoints() {
  std::lock_guard hold(shared_mutex_);
  SharedEndpoints counts;
  for (const auto& e : shared_endpoints_) {
    ++counts.endpoints;
    counts.open_comms += e->open_ports();
    counts.peers += e->peers();
    counts.stalled += e->stalled() ? 1 : 0;
  }
  return counts;
}

bool Device::close(std::string* why) {
  {
    std::lock_guard hold(shared_mutex_);
    size_t open = 0;
    for (const auto& e : shared_endpoints_) open += e->open_ports();
    if (open != 0) {
      *why = std::to_string(open) + " comm(s) still open on the shared endpoints";
      return false;
    }
    // (Their control buffers are registered in the hmr domain; comms retired with operations
    // that never ended go with them, after the provider's endpoint.)
    shared_endpoints_.clear();
  }
  if (hmr_ != nullptr) {
    const int rc = hmr_domain_close(hmr_);
    if (rc != 0) {
      *why = std::string("hmr_domain_close: ") + hmr_strerror(rc) + " (" + hmr_last_error() +
             "); memory registered with regMr is still open";
      return false;
    }
    hmr_ = nullptr;
  }
  return true;
}

Device::~Device() {
  std::string ignored;
  if (!close(&ignored)) {
    // Still in use: the libfabric domain must stay with it, and so must the endpoints of
    // comms still open.
    for (auto& e : shared_endpoints_) (void)e.release();
    return;
  }
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
}

}  // namespace hmr::nccl
