// nic::Nic — what hmr needs from a network adapter: capabilities, registration of host
// virtual ranges and dma-bufs, deregistration, and the optional operations some NICs have.
// An operation a NIC lacks returns HMR_EOPNOTSUPP with a reason; nothing here is ever a
// null function.  Adapters: sim (software NIC in this process), verbs (rdma-core), ofi
// (libfabric).
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

#include "nic/key_bytes.h"
#include "util/status.h"

namespace hmr::nic {

// The time one registration takes as a linear function of its size (UCX's reg_cost).
struct LinearCost {
  double overhead_ns = 0;  // fixed part
  double ns_per_byte = 0;  // growth per byte
};

// Whether a NIC can do one optional operation, and why not when it cannot (hmr_md_query_op).
struct Support {
  bool available = false;
  std::string reason;  // empty when available
};

// The memory operations beyond registration a NIC may have (verbs' and UCX's).
struct MemoryOperations {
  Support rereg;           // re-registration in place
  Support memory_windows;  // windows of either type
  Support odp;             // on-demand-paging registrations on request
  Support implicit_odp;    // one ODP registration of the whole address space
  Support advise;          // prefetch advice on ODP registrations
  Support indirect;        // one key over ranges of other registrations
};

struct Capabilities {
  std::string name;
  uint64_t required_mr_mode = 0;  // mr_mode bits the NIC cannot work without
  // Bits of core's sharing set (PROV_KEY, VIRT_ADDR) the NIC can honour when the application
  // supports them without requiring them.  A libfabric domain's addressing is fixed when it is
  // opened, so an ofi NIC whose domain uses offsets must not be handed VIRT_ADDR.
  uint64_t optional_mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
  size_t key_size = 8;            // bytes of a remote key
  size_t iov_limit = 1;
  size_t mr_cnt = 0;              // most registrations at once (0: unlimited)
  uint64_t max_mr_size = UINT64_MAX;
  // Registrations of host memory by address pin its pages (kernel RDMA drivers, not ODP): they
  // count against RLIMIT_MEMLOCK, and hmr bounds the bytes it holds pinned (docs/semantics.md,
  // "Under pressure").  Software NICs and libfabric's tcp and shm pin nothing.
  bool pins_host_memory = false;
  uint64_t max_pinned_bytes = 0;  // the NIC's own bound on pinned bytes (0: none stated)
  bool dmabuf_import = false;
  bool peer_direct = false;
  bool on_demand_paging = false;  // registrations are ODP ones (advise works)
  bool memory_windows = false;
  bool auth_keys = false;
  bool persistent_memory = false;
  bool rma = false;               // can move bytes through hmr endpoints (sim only)
  // A memory window takes its key from the table registrations use (mlx5's mkeys), so idle
  // registrations given back make room for one (NicRegistrar::alloc_window).
  bool windows_take_registration_keys = false;
  // Every call on the NIC must come from a thread that calls hmr on its domain: the
  // application serializes its calls (a wrapped libfabric domain opened FI_THREAD_DOMAIN), so
  // hmr's own threads (the deferred reaper, the asynchronous registrar) must not call it.
  bool serialized_by_application = false;
  // Its calls run the application's code (a callback NIC): a deregistration on one thread may
  // wait for something the application holds on another, such as a lock it keeps around its
  // hmr_mr_reg, so hmr never waits for a deregistration of this NIC's without a bound
  // (RegistrationCache::wait_for_in_transit).
  bool runs_application_code = false;
  // The registration cost when the NIC knows it (a vendor figure); empty: hmr measures it on
  // the first hmr_md_query of a domain (core/registration_cost.h).
  std::optional<LinearCost> reg_cost;
  // Filled by each adapter; the defaults say the NIC has none of them.
  MemoryOperations operations;
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
  // HMR_MR_ODP: pages are resolved when the NIC reaches them, nothing is pinned.  With one
  // segment at address 0 of length SIZE_MAX: the whole address space (implicit ODP).
  bool on_demand_paging = false;
  // Threads the adapter may use for one registration it splits into pieces (verbs chunks
  // above max_mr_size): HMR_REG_THREADS, the caller's own thread included.
  size_t parallelism = 1;
};

// What a registration gives back; `handle` is the NIC's own record, opaque to the core but
// unique among the NIC's live registrations (the device cache keys what it holds by it).
struct Registration {
  void* handle = nullptr;
  void* desc = nullptr;  // local descriptor
  KeyBytes key;          // remote key
  uint64_t base_addr = 0;  // the address a peer uses for byte 0 (VA or 0)
  uint64_t pinned_bytes = 0;  // host bytes it pins (page-rounded), as NicRegistrar counts them
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

// What a re-registration changes (verbs' ibv_rereg_mr); unset members stay as they are.
struct ReregRequest {
  std::vector<iovec> translation;     // the new ranges (host VAs); empty: unchanged
  void* protection_domain = nullptr;  // the NIC's new protection domain (verbs: struct ibv_pd*)
  std::optional<uint64_t> access;     // the new HMR_* access bits
};

// A memory window: a remote key onto part of a registration that can be re-pointed without
// re-registering.  Type 1 windows are bound by a verb, type 2 by a work request on a queue.
enum class WindowType { type1 = 1, type2 = 2 };
struct MemoryWindow {
  void* handle = nullptr;  // the NIC's own record
  WindowType type = WindowType::type1;
  KeyBytes key;            // the key a peer uses while the window is bound
};
// Binding a window to [addr, addr+len) of a registration.  The bind is posted to `queue` (verbs:
// the application's struct ibv_qp*) and completes there: the caller reaps the completion.
struct WindowBind {
  const Registration* registration = nullptr;
  uint64_t addr = 0;
  uint64_t len = 0;
  uint64_t access = 0;  // HMR_REMOTE_READ and/or HMR_REMOTE_WRITE
  void* queue = nullptr;
  uint64_t work_request_id = 0;
  bool signaled = true;
};

// ODP prefetch advice (verbs' ibv_advise_mr).
enum class Advice { prefetch, prefetch_write, prefetch_no_fault };

// One range of an existing registration, as a piece of an indirect key.
struct IndirectSegment {
  const Registration* registration = nullptr;
  uint64_t addr = 0;  // host VA inside the registration's memory
  uint64_t len = 0;
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
  // The NIC object registrations are made on (ofi: struct fid_domain*), written back to
  // hmr_domain_attr.nic_handle; null when the NIC has none to show.
  virtual void* native_handle() const { return nullptr; }
  // Closes the native objects the NIC opened itself, once nothing of hmr's is registered on
  // them (the domain's close, after its caches are gone; the NIC is destroyed next, whatever
  // this returns).  An error (HMR_EIO: objects the application made on native_handle() were
  // still there) says what went wrong: ofi leaves libfabric's domain open, verbs closes the
  // device all the same.  Nothing to do for a NIC that opened nothing or wraps the
  // application's objects.
  virtual Status close_native() { return ok_status(); }

  // Re-reads the translation of [segments] after the application changed the pages.
  virtual Status refresh(Registration& registration, std::span<const iovec> segments);
  // Publishes enable state, endpoint and counter bindings of a registration.
  virtual Status set_remote_access(Registration& registration, RemoteAccess access);
  // Checks that `desc` is a live local registration covering [buf, buf+len) with `access`.
  virtual Status check_local(void* desc, const void* buf, size_t len, uint64_t access);
  // Executes an RMA operation against this NIC's registrations (the target side).
  virtual Status remote_access(const RmaRequest& request);

  // Changes translation, protection domain and/or access of a registration in place; its key
  // and descriptor may change.
  virtual Status rereg(Registration& registration, const ReregRequest& request);
  // After a failed rereg: whether the registration is still what it was (an input the NIC
  // refused) or only fit for deregistration (ibv_rereg_mr's IBV_REREG_MR_ERR_CMD).
  virtual bool usable_after_failed_rereg(const Registration&) const { return true; }
  virtual Result<MemoryWindow> alloc_window(WindowType type);
  // Binds (or re-binds) a window; on success window.key is the key of the new binding.
  virtual Status bind_window(MemoryWindow& window, const WindowBind& bind);
  // Makes the window's key unusable by peers; posted to `queue` as a bind is.
  virtual Status invalidate_window(MemoryWindow& window, void* queue, uint64_t work_request_id,
                                   bool signaled);
  virtual Status dealloc_window(MemoryWindow& window);
  // Asks an on-demand-paging registration to map [ranges] ahead of use; `flush` waits for it.
  virtual Status advise(const Registration& registration, Advice advice,
                        std::span<const iovec> ranges, bool flush);
  // One key over `segments` in order, addressed from 0 (UMR/KLM); deregistered as any other.
  virtual Result<Registration> register_indirect(std::span<const IndirectSegment> segments,
                                                 uint64_t access);
};

// A Support that says the NIC lacks an operation: "<NIC> <what>".
Support unsupported(const std::string& nic_name, const char* what);

// The host bytes a registration pins on a NIC that pins (Capabilities::pins_host_memory), as
// the kernel charges them: every page a segment touches (ib_umem_get counts
// ib_umem_num_pages), each registration on its own even where ranges overlap.  A dma-buf,
// device memory and an ODP registration pin no host page.
uint64_t pinned_bytes_of(const RegistrationRequest& request);
// The same for host ranges by address (a re-registration's new translation).
uint64_t pinned_bytes_of(std::span<const iovec> segments);

// Creates the adapter named `name` ("sim", "verbs", "ofi") with its option string.  `handle` is
// the application's own NIC object for the adapter to work under (verbs: a struct ibv_pd*; ofi:
// a struct fid_domain*), or null.
Result<std::unique_ptr<Nic>> open_nic(const char* name, const char* options,
                                      void* handle = nullptr);

}  // namespace hmr::nic
