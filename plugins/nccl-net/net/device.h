// One NCCL device: a NIC of the chosen provider, with the libfabric fabric and domain its comms'
// endpoints are opened in (send and listen comms, and what recv comms post, share one:
// net/shared_endpoint.h), and the hmr domain
// layered on that libfabric domain, which does all of the device's memory registration
// (detection, dma-buf export, caching, invalidation).
#pragma once

#include <hmr/hmr.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../fabric/libfabric.h"
#include "../fabric/provider_nics.h"
#include "settings.h"
#include "shared_endpoint.h"

namespace hmr::nccl {

struct DeviceProperties {
  std::string name;      // the provider's NIC name ("lo", "eth0", "shm", "rdmap0s6")
  std::string pci_path;  // empty when unknown
  uint64_t guid = 0;
  int speed_mbps = 0;
  int ptr_support = 0;   // NCCL_PTR_* bits hmr can register for this NIC
  uint64_t max_message = 0;
  int max_comms = 0;  // comms the domain has endpoints, CQs and AVs for
};

class Device {
 public:
  // `settings`: the plugin's, kept by the device for its comms (read without the plugin's lock).
  static std::unique_ptr<Device> open(const Libfabric& libfabric, InfoPtr info,
                                      const std::string& provider, const Settings& settings,
                                      std::string* why);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Libfabric& libfabric() const { return *libfabric_; }
  fi_info* info() const { return info_.get(); }
  fid_domain* domain() const { return domain_; }
  hmr_domain* registrations() const { return hmr_; }
  const std::string& provider() const { return provider_; }
  const DeviceProperties& properties() const { return properties_; }
  const Settings& settings() const { return settings_; }
  // Whether peers address registered memory by virtual address (else by offset into the
  // registration).
  bool virtual_addressing() const { return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }
  // A port for a new comm on the endpoint every comm of the device posts on (opened for the
  // first one): a send comm's operations, a listener's connect requests and refusals, and a
  // recv comm's control messages, flush reads and eager copies (its receives stay on its own
  // endpoint).  nullptr with `why` when it cannot
  // be opened.
  std::unique_ptr<SharedEndpoint::Port> attach_comm(std::string* why);
  // A destroyed comm's end: `tenant` (what its operations point into) is retired on its
  // port's endpoint, under the device's lock, so no other comm's close frees that endpoint
  // meanwhile; then the endpoints no comm uses any more are closed (what comms leave behind
  // is nothing, and the next comm opens a fresh one).
  void retire_comm(std::unique_ptr<SharedEndpoint::Tenant> tenant);
  // Closes the shared endpoints no open comm uses any more (ending what retired comms left on
  // them).
  void release_unused_shared_endpoints();
  // The endpoints the device's comms share now (one, more while stalled ones drain, 0 with no
  // comm), and the comms open on them (send, recv and listen): what tests look at.
  struct SharedEndpoints {
    size_t endpoints = 0;
    size_t open_comms = 0;
    size_t peers = 0;  // addresses inserted in them
    size_t stalled = 0;  // of the endpoints (SharedEndpoint::stalled)
  };
  SharedEndpoints shared_endpoints();
  // Closes the shared endpoints, then the hmr domain; false (and the device kept) while a comm
  // is open on them or memory is still registered.
  bool close(std::string* why);

 private:
  friend struct SharedEndpointProbe;  // tests/nccl-net/shared_endpoint_test.cpp
  Device(const Libfabric& libfabric, InfoPtr info) : libfabric_(&libfabric), info_(std::move(info)) {}
  bool open_registrations(std::string* why);
  void release_unused_locked();  // (under shared_mutex_)
  int query_ptr_support() const;

  const Libfabric* libfabric_;
  InfoPtr info_;
  std::string provider_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  hmr_domain* hmr_ = nullptr;
  std::mutex shared_mutex_;
  // The comms' shared endpoints: new comms go to the last, unless it is stalled
  // (SharedEndpoint::stalled), when a fresh one is opened; the ones before it were stalled
  // and are kept for the comms still on them.
  std::vector<std::unique_ptr<SharedEndpoint>> shared_endpoints_;
  DeviceProperties properties_;
  Settings settings_;
};

}  // namespace hmr::nccl
