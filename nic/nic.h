// nic::Nic — what hmr needs from a network adapter: capabilities, registration of host
// virtual ranges and dma-bufs, deregistration, and the optional operations some NICs have.
// An operation a NIC lacks returns HMR_EOPNOTSUPP with a reason; nothing here is ever a
// null function.  Adapters: sim (software NIC in this process), later ofi and verbs.
#pragma once

#include <hmr/hmr.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/key_bytes.h"
#include "core/status.h"

namespace hmr::nic {

struct Capabilities {
  std::string name;
  uint64_t required_mr_mode = 0;  // mr_mode bits the NIC cannot work without
  size_t key_size = 8;            // bytes of a remote key
  size_t iov_limit = 1;
  size_t mr_cnt = 0;              // most registrations at once (0: unlimited)
  uint64_t max_mr_size = UINT64_MAX;
  bool dmabuf_import = false;
  bool peer_direct = false;
  bool auth_keys = false;
  bool persistent_memory = false;
  bool rma = false;               // can move bytes through hmr endpoints (sim only)
};

// One registration request, already validated by the domain.
struct RegistrationRequest {
  std::span<const iovec> segments;             // host-addressable ranges, in order
  const hmr_mr_dmabuf* dmabuf = nullptr;       // set instead of segments for dma-buf
  uint64_t access = 0;
  uint64_t flags = 0;
  std::optional<uint64_t> requested_key;       // absent: the NIC chooses (PROV_KEY)
  bool virt_addr = true;                       // remote addresses are VAs, else 0-based
  bool track_page_changes = false;             // MMU_NOTIFY: the NIC must be refreshed
  bool enabled = true;                         // reachable by peers from the start
  hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
  uint64_t device = 0;
  void* hmem_data = nullptr;
  size_t page_size = 0;
};

// What a registration gives back; `handle` is the NIC's own record, opaque to the core.
struct Registration {
  void* handle = nullptr;
  void* desc = nullptr;  // local descriptor
  KeyBytes key;          // remote key
  uint64_t base_addr = 0;  // the address a peer uses for byte 0 (VA or 0)
};

// Who may reach a registration remotely, and which counters count what.
struct CounterBinding {
  std::atomic<uint64_t>* counter = nullptr;
  uint64_t events = 0;  // HMR_REMOTE_WRITE and/or HMR_REMOTE_READ
};
struct RemoteAccess {
  bool enabled = false;
  const void* endpoint = nullptr;  // only this endpoint may serve it (MR_ENDPOINT)
  std::vector<CounterBinding> counters;
};

enum class RmaOp { write, read, fetch_add };

// One RMA operation arriving at a target NIC.
struct RmaRequest {
  RmaOp op = RmaOp::write;
  const void* target_endpoint = nullptr;
  KeyBytes key;
  uint64_t addr = 0;
  void* local = nullptr;  // source of a write, sink of a read
  size_t len = 0;
  uint64_t operand = 0;   // fetch_add
  uint64_t* result = nullptr;
};

class Nic {
 public:
  virtual ~Nic() = default;

  virtual const Capabilities& capabilities() const = 0;
  virtual Result<Registration> register_memory(const RegistrationRequest& request) = 0;
  virtual Status deregister(Registration& registration) = 0;

  // Re-reads the translation of [segments] after the application changed the pages.
  virtual Status refresh(Registration& registration, std::span<const iovec> segments);
  // Publishes enable state, endpoint and counter bindings of a registration.
  virtual Status set_remote_access(Registration& registration, RemoteAccess access);
  // Checks that `desc` is a live local registration covering [buf, buf+len) with `access`.
  virtual Status check_local(void* desc, const void* buf, size_t len, uint64_t access);
  // Executes an RMA operation against this NIC's registrations (the target side).
  virtual Status remote_access(const RmaRequest& request);
};

// Creates the adapter named `name` ("sim") with its option string.
Result<std::unique_ptr<Nic>> open_nic(const char* name, const char* options);

}  // namespace hmr::nic
