// hmr.hpp — thin, header-only C++ RAII wrapper over the hmr C ABI (hmr.h).
//
// Every object owns one C handle, is move-only, and closes it in its destructor.  A destructor
// never throws: a close that fails there (for example -HMR_EBUSY because MRs of a domain are
// still open) is ignored and the handle leaks.  Call close() yourself where the outcome
// matters; it throws like every other method.
//
// Every method maps to one C call.  Failures throw hmr::Error, whose code() is the positive
// HMR_E* value and whose what() is "<call>: <hmr_strerror>: <hmr_last_error>".  Two methods
// map to at most two calls, and say so: MemoryRegion::raw_key() (retries once with the size
// hmr asked for) and EventQueue::read()/sread() (fetch an error entry with hmr_eq_readerr).
//
// Lifetimes follow the C ABI: memory windows close before the MRs they are bound to, indirect
// MRs before the MRs they span, MRs before the endpoints and counters they are bound to, an
// initiator endpoint before the endpoint it is connected to, all of them before their domain,
// and the domain before the event queue bound to it.  Declaring objects in opening order
// (event queue, domain, target endpoint, initiator endpoint, counters, MRs, indirect MRs,
// memory windows) makes the destructors run in closing order.
//
// Needs C++17 or later.  The C semantics are in docs/semantics.md.
#ifndef HMR_HMR_HPP
#define HMR_HMR_HPP

#include <hmr/hmr.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hmr {

// ------------------------------------------------------------------------------ errors ----

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // The positive HMR_E* code (HMR_EINVAL, HMR_ENOKEY, ...).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {

// Builds the Error for a failed call.  The reason is copied first: hmr_last_error() is valid
// only until the next hmr call, and hmr_strerror() is one.
[[noreturn]] inline void throw_error(int rc, const char* call) {
  const std::string reason = hmr_last_error();
  const int code = rc < 0 ? -rc : rc;
  std::string message = std::string(call) + ": " + hmr_strerror(code);
  if (!reason.empty()) message += ": " + reason;
  throw Error(code, message);
}

inline int check(int rc, const char* call) {
  if (rc < 0) throw_error(rc, call);
  return rc;
}

// What a failed close leaves (hmr.h): -HMR_EBUSY closed nothing (objects still open on it,
// bound to it, or using it); any other failure of a close let the object go all the same,
// except hmr_mw_close's (a window the NIC refused to free stays open); hmr_rkey_release frees
// the key whatever it returns.  Keeping a handle its
// close freed would close it again from the destructor: the storage of a freed handle is the
// next object of its size, which that second close would close.
inline bool open_if_busy(int rc) noexcept { return rc == -HMR_EBUSY; }
inline bool never_open(int) noexcept { return false; }
inline bool open_unless_not_a_handle(int rc) noexcept { return rc != -HMR_EINVAL; }

// Owns one C handle; `Close` is the hmr_*_close function of its type, `StillOpen` says whether
// a failure of it left the object open.
template <typename T, int (*Close)(T*), bool (*StillOpen)(int) = open_if_busy>
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(T* handle) noexcept : handle_(handle) {}
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : handle_(other.release()) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = other.release();
    }
    return *this;
  }

  T* get() const noexcept { return handle_; }
  T* release() noexcept { return std::exchange(handle_, nullptr); }
  // Closes, ignoring the outcome (destructors, move assignment).
  void reset() noexcept {
    if (handle_ != nullptr) (void)Close(std::exchange(handle_, nullptr));
  }
  // Closes and throws on failure; a failure that left the object open leaves the handle owned
  // (so the close can be retried), any other lets go of it.
  void close(const char* call) {
    if (handle_ == nullptr) return;
    const int rc = Close(handle_);
    if (rc < 0 && StillOpen(rc)) throw_error(rc, call);
    handle_ = nullptr;
    check(rc, call);
  }

 private:
  T* handle_ = nullptr;
};

// Throws if an object is used after a move or close, rather than passing NULL to hmr.
inline void require_open(const void* handle, const char* what) {
  if (handle == nullptr) {
    throw Error(HMR_EINVAL, std::string(what) + ": object is closed or was moved from");
  }
}

}  // namespace detail

class Domain;
class EventQueue;
class Counter;
class Endpoint;

// ------------------------------------------------------------------------------ event queue

// One completion read from an event queue.  `error` is 0 for HMR_MR_COMPLETE, or the positive
// HMR_E* code of a failed asynchronous registration (then `reason` says why).
struct Event {
  uint32_t event = 0;  // HMR_MR_COMPLETE; 0 for an error entry
  hmr_mr* mr = nullptr;
  void* context = nullptr;
  uint64_t data = 0;
  int error = 0;
  std::string reason;
};

class EventQueue {
 public:
  // entries: capacity hint, 0 for the default.
  explicit EventQueue(size_t entries = 0) {
    hmr_eq_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.entries = entries;
    hmr_eq* eq = nullptr;
    detail::check(hmr_eq_open(&attr, &eq), "hmr_eq_open");
    handle_ = detail::Handle<hmr_eq, hmr_eq_close>(eq);
  }

  // The next event, or std::nullopt when none is waiting.
  std::optional<Event> read() {
    detail::require_open(get(), "hmr_eq_read");
    uint32_t kind = 0;
    hmr_eq_entry entry;
    std::memset(&entry, 0, sizeof entry);
    const int rc = hmr_eq_read(get(), &kind, &entry, 0);
    return finish(rc, kind, entry, "hmr_eq_read");
  }

  // Waits up to timeout_ms (-1: forever) for the next event; std::nullopt on timeout.
  std::optional<Event> sread(int timeout_ms) {
    detail::require_open(get(), "hmr_eq_sread");
    uint32_t kind = 0;
    hmr_eq_entry entry;
    std::memset(&entry, 0, sizeof entry);
    const int rc = hmr_eq_sread(get(), &kind, &entry, timeout_ms, 0);
    return finish(rc, kind, entry, "hmr_eq_sread");
  }

  void close() { handle_.close("hmr_eq_close"); }
  hmr_eq* get() const noexcept { return handle_.get(); }
  hmr_fid* fid() const noexcept { return hmr_eq_fid(handle_.get()); }
  hmr_eq* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  std::optional<Event> finish(int rc, uint32_t kind, const hmr_eq_entry& entry,
                              const char* call) {
    if (rc == -HMR_EAGAIN || rc == -HMR_ETIMEDOUT) return std::nullopt;
    Event event;
    if (rc == -HMR_EAVAIL) {
      hmr_eq_err_entry err;
      std::memset(&err, 0, sizeof err);
      const int err_rc = hmr_eq_readerr(get(), &err, 0);
      // Another thread read the error entry first: there is no event for this call.
      if (err_rc == -HMR_EAGAIN) return std::nullopt;
      detail::check(err_rc, "hmr_eq_readerr");
      event.mr = reinterpret_cast<hmr_mr*>(err.fid);
      event.context = err.context;
      event.data = err.data;
      event.error = err.err;
      event.reason.assign(err.reason, strnlen(err.reason, sizeof err.reason));
      return event;
    }
    detail::check(rc, call);
    event.event = kind;
    event.mr = reinterpret_cast<hmr_mr*>(entry.fid);
    event.context = entry.context;
    event.data = entry.data;
    return event;
  }

  detail::Handle<hmr_eq, hmr_eq_close> handle_;
};

// ------------------------------------------------------------------------------ domain ----

// What to ask for when opening a domain; the fields of hmr_domain_attr (0 = the NIC's value).
struct DomainOptions {
  std::string nic = "sim";
  std::string nic_options;  // e.g. "require=VIRT_ADDR|PROV_KEY;key_size=4"
  uint64_t mr_mode = 0;     // the mr_mode bits the application supports
  size_t mr_key_size = 0;
  size_t mr_iov_limit = 0;
  size_t mr_cnt = 0;
  hmr_threading threading = HMR_THREAD_UNSPEC;
  size_t cache_max_count = 0;  // 0: the process default (FI_MR_CACHE_MAX_COUNT, else 1024)
  size_t cache_max_size = 0;   // 0: the process default (FI_MR_CACHE_MAX_SIZE, ...)
  std::string cache_monitor;   // "userfaultfd", "memhooks", "disabled", an imported one; "": default
  uint64_t flags = 0;          // HMR_DOMAIN_* (HMR_DOMAIN_ALLOW_HMEM_COPY)
};

// What Domain::stats() returns.
using DomainStats = hmr_domain_stats;

// Whether an optional memory operation is available in a domain (Domain::op_available), and
// why not when it is not.
struct OpAvailability {
  bool available = false;
  std::string reason;  // empty when available
  explicit operator bool() const noexcept { return available; }
};

// What hmr_domain_open wrote back: what the application must honour.
struct NegotiatedAttributes {
  uint64_t mr_mode = 0;
  size_t mr_key_size = 0;
  size_t mr_iov_limit = 0;
  size_t mr_cnt = 0;
  hmr_threading threading = HMR_THREAD_UNSPEC;
  size_t cache_max_count = 0;  // 0 when caching is off
  size_t cache_max_size = 0;
  std::string cache_monitor;   // the monitor in use; "disabled" when caching is off
};

class Domain {
 public:
  explicit Domain(const DomainOptions& options = DomainOptions()) {
    hmr_domain_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.nic = options.nic.c_str();
    attr.nic_options = options.nic_options.empty() ? nullptr : options.nic_options.c_str();
    attr.mr_mode = options.mr_mode;
    attr.mr_key_size = options.mr_key_size;
    attr.mr_iov_limit = options.mr_iov_limit;
    attr.mr_cnt = options.mr_cnt;
    attr.threading = options.threading;
    attr.cache_max_count = options.cache_max_count;
    attr.cache_max_size = options.cache_max_size;
    attr.cache_monitor = options.cache_monitor.empty() ? nullptr : options.cache_monitor.c_str();
    attr.flags = options.flags;
    open(attr);
  }
  // From a C attribute struct (attr.size must be set); it is copied, not written back.
  explicit Domain(hmr_domain_attr attr) { open(attr); }

  const NegotiatedAttributes& negotiated() const noexcept { return negotiated_; }

  DomainStats stats() const {
    detail::require_open(get(), "hmr_domain_query_stats");
    DomainStats result;
    std::memset(&result, 0, sizeof result);
    result.size = sizeof result;
    detail::check(hmr_domain_query_stats(get(), &result), "hmr_domain_query_stats");
    return result;
  }

  // What the domain can register and at what cost (hmr_md_query); `fields`: HMR_MD_ATTR_*.
  hmr_md_attr md_query(uint64_t fields = HMR_MD_ATTR_REG_COST) const {
    detail::require_open(get(), "hmr_md_query");
    hmr_md_attr result;
    std::memset(&result, 0, sizeof result);
    result.size = sizeof result;
    result.field_mask = fields;
    detail::check(hmr_md_query(get(), &result), "hmr_md_query");
    return result;
  }

  // Whether `op` (HMR_MD_OP_REREG, _MEMORY_WINDOWS, _ODP, ...) works in this domain
  // (hmr_md_query_op).  Unavailable is an answer, not an error: only a bad argument throws.
  OpAvailability op_available(hmr_md_op op) const {
    detail::require_open(get(), "hmr_md_query_op");
    char reason[1024] = {};
    const int rc = detail::check(hmr_md_query_op(get(), op, reason, sizeof reason),
                                 "hmr_md_query_op");
    OpAvailability result;
    result.available = rc == 1;
    if (!result.available) result.reason.assign(reason, strnlen(reason, sizeof reason));
    return result;
  }

  // Drops this domain's cached registrations overlapping [addr, addr + len).
  void invalidate(const void* addr, size_t len) {
    detail::require_open(get(), "hmr_mem_invalidate");
    detail::check(hmr_mem_invalidate(get(), addr, len), "hmr_mem_invalidate");
  }

  // Deregisters every cached registration no MR holds.
  void cache_flush() {
    detail::require_open(get(), "hmr_domain_cache_flush");
    detail::check(hmr_domain_cache_flush(get()), "hmr_domain_cache_flush");
  }

  // With HMR_REG_MR every later registration completes asynchronously on `eq`.
  void bind(EventQueue& eq, uint64_t flags = HMR_REG_MR) {
    detail::require_open(get(), "hmr_domain_bind");
    detail::check(hmr_domain_bind(get(), eq.fid(), flags), "hmr_domain_bind");
  }

  // A peer's raw key (from MemoryRegion::raw_key()) as a 64-bit key for this domain.
  uint64_t map_raw(uint64_t base_addr, const std::vector<uint8_t>& raw_key) {
    detail::require_open(get(), "hmr_mr_map_raw");
    uint64_t key = 0;
    detail::check(hmr_mr_map_raw(get(), base_addr, raw_key.data(), raw_key.size(), &key, 0),
                  "hmr_mr_map_raw");
    return key;
  }
  void unmap_key(uint64_t key) {
    detail::require_open(get(), "hmr_mr_unmap_key");
    detail::check(hmr_mr_unmap_key(get(), key), "hmr_mr_unmap_key");
  }

  // Throws Error(HMR_EBUSY) while MRs, counters or endpoints of the domain are open.
  void close() { handle_.close("hmr_domain_close"); }
  hmr_domain* get() const noexcept { return handle_.get(); }
  hmr_domain* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  void open(hmr_domain_attr& attr) {
    hmr_domain* domain = nullptr;
    detail::check(hmr_domain_open(&attr, &domain), "hmr_domain_open");
    handle_ = detail::Handle<hmr_domain, hmr_domain_close>(domain);
    negotiated_.mr_mode = attr.mr_mode;
    negotiated_.mr_key_size = attr.mr_key_size;
    negotiated_.mr_iov_limit = attr.mr_iov_limit;
    negotiated_.mr_cnt = attr.mr_cnt;
    negotiated_.threading = attr.threading;
    negotiated_.cache_max_count = attr.cache_max_count;
    negotiated_.cache_max_size = attr.cache_max_size;
    negotiated_.cache_monitor = attr.cache_monitor != nullptr ? attr.cache_monitor : "";
  }

  detail::Handle<hmr_domain, hmr_domain_close> handle_;
  NegotiatedAttributes negotiated_;
};

// ------------------------------------------------------------------------------ counter ---

class Counter {
 public:
  explicit Counter(Domain& domain) {
    detail::require_open(domain.get(), "hmr_cntr_open");
    hmr_cntr* cntr = nullptr;
    detail::check(hmr_cntr_open(domain.get(), nullptr, &cntr), "hmr_cntr_open");
    handle_ = detail::Handle<hmr_cntr, hmr_cntr_close>(cntr);
  }

  uint64_t value() const {
    detail::require_open(get(), "hmr_cntr_read");
    uint64_t value = 0;
    detail::check(hmr_cntr_read(get(), &value), "hmr_cntr_read");
    return value;
  }

  // Throws Error(HMR_EBUSY) while MRs are bound to it.
  void close() { handle_.close("hmr_cntr_close"); }
  hmr_cntr* get() const noexcept { return handle_.get(); }
  hmr_fid* fid() const noexcept { return hmr_cntr_fid(handle_.get()); }
  hmr_cntr* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  detail::Handle<hmr_cntr, hmr_cntr_close> handle_;
};

// ------------------------------------------------------------------------------ endpoint --

class Endpoint {
 public:
  explicit Endpoint(Domain& domain) {
    detail::require_open(domain.get(), "hmr_ep_open");
    hmr_ep* ep = nullptr;
    detail::check(hmr_ep_open(domain.get(), nullptr, &ep), "hmr_ep_open");
    handle_ = detail::Handle<hmr_ep, hmr_ep_close>(ep);
  }

  // Makes `peer` the target of this endpoint's RMA operations.
  void connect(Endpoint& peer) {
    detail::require_open(get(), "hmr_ep_connect");
    detail::check(hmr_ep_connect(get(), peer.get()), "hmr_ep_connect");
  }

  // RMA write of [buf, buf+len) to the peer's (addr, key); desc: the local MR's descriptor
  // or nullptr (required in HMR_MR_LOCAL domains).
  void write(const void* buf, size_t len, void* desc, uint64_t addr, uint64_t key) {
    detail::require_open(get(), "hmr_ep_write");
    detail::check(hmr_ep_write(get(), buf, len, desc, addr, key), "hmr_ep_write");
  }
  void read(void* buf, size_t len, void* desc, uint64_t addr, uint64_t key) {
    detail::require_open(get(), "hmr_ep_read");
    detail::check(hmr_ep_read(get(), buf, len, desc, addr, key), "hmr_ep_read");
  }
  // Adds `operand` to the uint64_t at (addr, key); returns the previous value.
  uint64_t fetch_add(uint64_t operand, uint64_t addr, uint64_t key) {
    detail::require_open(get(), "hmr_ep_fetch_add");
    uint64_t previous = 0;
    detail::check(hmr_ep_fetch_add(get(), operand, &previous, addr, key), "hmr_ep_fetch_add");
    return previous;
  }

  // Throws Error(HMR_EBUSY) while MRs are bound to it or another endpoint is connected to it.
  void close() { handle_.close("hmr_ep_close"); }
  hmr_ep* get() const noexcept { return handle_.get(); }
  hmr_fid* fid() const noexcept { return hmr_ep_fid(handle_.get()); }
  hmr_ep* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  detail::Handle<hmr_ep, hmr_ep_close> handle_;
};

// ------------------------------------------------------------------------------ memory region

// What a peer needs to address an MR: the key bytes and the address of the MR's first byte
// (its virtual address in VIRT_ADDR domains, else 0).
struct RawKey {
  uint64_t base_addr = 0;
  std::vector<uint8_t> bytes;
};

class MemoryRegion {
 public:
  MemoryRegion() noexcept = default;
  // Adopts an MR registered through the C ABI (or read from an Event).
  explicit MemoryRegion(hmr_mr* mr) noexcept : handle_(mr) {}

  // hmr_mr_reg: one contiguous buffer.  requested_key is used only in domains without
  // HMR_MR_PROV_KEY; `context` comes back in the completion of an asynchronous registration.
  static MemoryRegion reg(Domain& domain, const void* buf, size_t len, uint64_t access,
                          uint64_t flags = 0, uint64_t requested_key = 0,
                          void* context = nullptr) {
    detail::require_open(domain.get(), "hmr_mr_reg");
    hmr_mr* mr = nullptr;
    detail::check(
        hmr_mr_reg(domain.get(), buf, len, access, 0, requested_key, flags, &mr, context),
        "hmr_mr_reg");
    return MemoryRegion(mr);
  }

  // hmr_mr_regv: several segments, one region.
  static MemoryRegion regv(Domain& domain, const iovec* iov, size_t count, uint64_t access,
                           uint64_t flags = 0, uint64_t requested_key = 0,
                           void* context = nullptr) {
    detail::require_open(domain.get(), "hmr_mr_regv");
    hmr_mr* mr = nullptr;
    detail::check(
        hmr_mr_regv(domain.get(), iov, count, access, 0, requested_key, flags, &mr, context),
        "hmr_mr_regv");
    return MemoryRegion(mr);
  }
  static MemoryRegion regv(Domain& domain, const std::vector<iovec>& iov, uint64_t access,
                           uint64_t flags = 0, uint64_t requested_key = 0,
                           void* context = nullptr) {
    return regv(domain, iov.data(), iov.size(), access, flags, requested_key, context);
  }

  // hmr_mr_regattr: everything (dma-buf, iface and device, auth key, page size).
  static MemoryRegion regattr(Domain& domain, const hmr_mr_attr& attr, uint64_t flags = 0) {
    detail::require_open(domain.get(), "hmr_mr_regattr");
    hmr_mr* mr = nullptr;
    detail::check(hmr_mr_regattr(domain.get(), &attr, flags, &mr), "hmr_mr_regattr");
    return MemoryRegion(mr);
  }

  // hmr_mr_reg_indirect: one key over ranges of MRs of the domain, in order; a peer addresses
  // its bytes from 0.  The MRs cannot be closed or re-registered while it is open.
  static MemoryRegion reg_indirect(Domain& domain, const hmr_mr_segment* segments, size_t count,
                                   uint64_t access) {
    detail::require_open(domain.get(), "hmr_mr_reg_indirect");
    hmr_mr* mr = nullptr;
    detail::check(hmr_mr_reg_indirect(domain.get(), segments, count, access, &mr),
                  "hmr_mr_reg_indirect");
    return MemoryRegion(mr);
  }
  static MemoryRegion reg_indirect(Domain& domain, const std::vector<hmr_mr_segment>& segments,
                                   uint64_t access) {
    return reg_indirect(domain, segments.data(), segments.size(), access);
  }

  // Local descriptor; nullptr while an asynchronous registration is pending.
  void* desc() const noexcept { return hmr_mr_desc(get()); }
  // 64-bit key; HMR_KEY_NOTAVAIL in RAW domains and while pending.  Does not throw.
  uint64_t key() const noexcept { return hmr_mr_key(get()); }

  RawKey raw_key() const {
    detail::require_open(get(), "hmr_mr_raw_attr");
    RawKey raw;
    raw.bytes.resize(16);  // every key hmr knows today fits; retried once if not
    size_t size = raw.bytes.size();
    int rc = hmr_mr_raw_attr(get(), &raw.base_addr, raw.bytes.data(), &size, 0);
    if (rc == -HMR_ETOOSMALL) {
      raw.bytes.resize(size);
      rc = hmr_mr_raw_attr(get(), &raw.base_addr, raw.bytes.data(), &size, 0);
    }
    detail::check(rc, "hmr_mr_raw_attr");
    raw.bytes.resize(size);
    return raw;
  }

  // hmr_rkey_pack: the bytes a peer passes to RemoteKey::unpack.
  std::vector<uint8_t> pack_rkey() const {
    detail::require_open(get(), "hmr_rkey_pack");
    std::vector<uint8_t> bytes(HMR_RKEY_PACKED_MAX);
    size_t size = bytes.size();
    detail::check(hmr_rkey_pack(get(), bytes.data(), &size), "hmr_rkey_pack");
    bytes.resize(size);
    return bytes;
  }

  // Binds to an endpoint (HMR_MR_ENDPOINT domains).
  void bind(Endpoint& ep) {
    detail::require_open(get(), "hmr_mr_bind");
    detail::check(hmr_mr_bind(get(), ep.fid(), 0), "hmr_mr_bind");
  }
  // Binds a counter to count remote HMR_REMOTE_WRITE and/or HMR_REMOTE_READ events.
  void bind(Counter& counter, uint64_t flags) {
    detail::require_open(get(), "hmr_mr_bind");
    detail::check(hmr_mr_bind(get(), counter.fid(), flags), "hmr_mr_bind");
  }
  void enable() {
    detail::require_open(get(), "hmr_mr_enable");
    detail::check(hmr_mr_enable(get()), "hmr_mr_enable");
  }
  // The pages behind these ranges changed (HMR_MR_MMU_NOTIFY domains).
  void refresh(const iovec* iov, size_t count, uint64_t flags = 0) {
    detail::require_open(get(), "hmr_mr_refresh");
    detail::check(hmr_mr_refresh(get(), iov, count, flags), "hmr_mr_refresh");
  }
  void refresh(void* buf, size_t len) {
    const iovec iov = {buf, len};
    refresh(&iov, 1);
  }

  // hmr_mr_rereg: changes the MR in place; `flags` (HMR_MR_REREG_TRANSLATION, _ACCESS, _PD)
  // say which members of `attr` count (attr.size must be set).  key() and desc() may change:
  // read them again.  When the NIC itself fails, only close() is left valid.
  void rereg(uint64_t flags, const hmr_mr_rereg_attr& attr) {
    detail::require_open(get(), "hmr_mr_rereg");
    detail::check(hmr_mr_rereg(get(), flags, &attr), "hmr_mr_rereg");
  }
  // The MR now covers [buf, buf + len), with its access unchanged.
  void rereg_translation(const void* buf, size_t len) {
    const iovec iov = {const_cast<void*>(buf), len};
    hmr_mr_rereg_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    rereg(HMR_MR_REREG_TRANSLATION, attr);
  }
  // The MR now grants `access` (HMR_* access bits) over the same memory.
  void rereg_access(uint64_t access) {
    hmr_mr_rereg_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.access = access;
    rereg(HMR_MR_REREG_ACCESS, attr);
  }

  // hmr_mem_advise over [addr, addr + len) (inside the MR).  WILLNEED maps an ODP MR's pages
  // for the NIC now; on a pinned MR it does nothing.
  void advise(const void* addr, size_t len, hmr_mem_advice advice = HMR_MADV_WILLNEED) {
    detail::require_open(get(), "hmr_mem_advise");
    detail::check(hmr_mem_advise(get(), addr, len, advice), "hmr_mem_advise");
  }

  // What the memory is and how it reached the NIC (dma-buf, peer-direct, host shadow, ...).
  hmr_mr_info info() const {
    detail::require_open(get(), "hmr_mr_query");
    hmr_mr_info result;
    std::memset(&result, 0, sizeof result);
    result.size = sizeof result;
    detail::check(hmr_mr_query(get(), &result), "hmr_mr_query");
    return result;
  }
  // Host-shadow MRs: HMR_SYNC_TO_DEVICE or HMR_SYNC_FROM_DEVICE over [offset, offset + len)
  // (len 0: to the end).  Other MRs: nothing to copy.
  void sync(uint64_t flags, uint64_t offset = 0, size_t len = 0) {
    detail::require_open(get(), "hmr_mr_sync");
    detail::check(hmr_mr_sync(get(), offset, len, flags), "hmr_mr_sync");
  }

  void close() { handle_.close("hmr_mr_close"); }
  hmr_mr* get() const noexcept { return handle_.get(); }
  hmr_mr* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  detail::Handle<hmr_mr, hmr_mr_close> handle_;
};

// ------------------------------------------------------------------------------ memory window

// A key onto part of an MR registered with HMR_MW_BIND (hmr_mw_*), moved or revoked without
// touching the MR.  Type 1 re-binds at any time; type 2 must be invalidated first.  Every bind
// gives a new key.  The MR cannot be closed while the window is bound to it.
class MemoryWindow {
 public:
  MemoryWindow() noexcept = default;
  explicit MemoryWindow(Domain& domain, hmr_mw_type type = HMR_MW_TYPE_1) {
    detail::require_open(domain.get(), "hmr_mw_alloc");
    hmr_mw* mw = nullptr;
    detail::check(hmr_mw_alloc(domain.get(), type, &mw), "hmr_mw_alloc");
    handle_ = detail::Handle<hmr_mw, hmr_mw_close, detail::open_unless_not_a_handle>(mw);
  }
  // Adopts a window allocated through the C ABI.
  explicit MemoryWindow(hmr_mw* mw) noexcept : handle_(mw) {}

  // Binds the window to [addr, addr + len) of `mr` with `access` (HMR_REMOTE_READ and/or
  // HMR_REMOTE_WRITE) and returns its new key; a peer addresses the window's bytes as it
  // addresses the MR's.  post: where the bind is posted (verbs: the ibv_qp); nullptr on sim.
  uint64_t bind(MemoryRegion& mr, const void* addr, size_t len, uint64_t access,
                const hmr_mw_post* post = nullptr) {
    detail::require_open(get(), "hmr_mw_bind");
    uint64_t key = 0;
    detail::check(hmr_mw_bind(get(), mr.get(), addr, len, access, post, &key), "hmr_mw_bind");
    return key;
  }
  // Revokes the window's key: RMA through it fails afterwards.
  void invalidate(const hmr_mw_post* post = nullptr) {
    detail::require_open(get(), "hmr_mw_invalidate");
    detail::check(hmr_mw_invalidate(get(), post), "hmr_mw_invalidate");
  }

  // Unbinds (if bound) and frees the window.
  void close() { handle_.close("hmr_mw_close"); }
  hmr_mw* get() const noexcept { return handle_.get(); }
  hmr_mw* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  detail::Handle<hmr_mw, hmr_mw_close, detail::open_unless_not_a_handle> handle_;
};

// ------------------------------------------------------------------------------ remote keys

// A peer's MR unpacked for this domain (hmr_rkey_unpack); released when destroyed.
class RemoteKey {
 public:
  RemoteKey() noexcept = default;
  static RemoteKey unpack(Domain& domain, const void* bytes, size_t len);
  static RemoteKey unpack(Domain& domain, const std::vector<uint8_t>& bytes) {
    return unpack(domain, bytes.data(), bytes.size());
  }

  hmr_rkey_info info() const {
    detail::require_open(get(), "hmr_rkey_query");
    hmr_rkey_info info;
    std::memset(&info, 0, sizeof info);
    info.size = sizeof info;
    detail::check(hmr_rkey_query(get(), &info), "hmr_rkey_query");
    return info;
  }
  // The remote address of the MR's first byte and the key, as hmr_ep_write/read take them.
  uint64_t addr() const { return info().addr; }
  uint64_t key() const { return info().key; }

  void release() { handle_.close("hmr_rkey_release"); }
  hmr_rkey* get() const noexcept { return handle_.get(); }
  explicit operator bool() const noexcept { return get() != nullptr; }

 private:
  explicit RemoteKey(hmr_rkey* rkey) noexcept : handle_(rkey) {}
  detail::Handle<hmr_rkey, hmr_rkey_release, detail::never_open> handle_;
};

inline RemoteKey RemoteKey::unpack(Domain& domain, const void* bytes, size_t len) {
  detail::require_open(domain.get(), "hmr_rkey_unpack");
  hmr_rkey* rkey = nullptr;
  detail::check(hmr_rkey_unpack(domain.get(), bytes, len, &rkey), "hmr_rkey_unpack");
  return RemoteKey(rkey);
}

// ------------------------------------------------------------------------------ memory ----

// hmr_mem_query: what [addr, addr + len) is; `fields` asks for HMR_MEM_ATTR_SYS_DEV and/or
// HMR_MEM_ATTR_DMABUF (the returned dmabuf_fd is then the caller's to close).
inline hmr_mem_attr mem_query(const void* addr, size_t len, uint64_t fields = 0) {
  hmr_mem_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.field_mask = fields;
  detail::check(hmr_mem_query(addr, len, &attr), "hmr_mem_query");
  return attr;
}

struct MemoryType {
  hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
  hmr_mem_kind kind = HMR_MEM_HOST;
};
inline MemoryType detect_memory_type(const void* addr, size_t len) {
  MemoryType type;
  detail::check(hmr_detect_memory_type(addr, len, &type.iface, &type.kind),
                "hmr_detect_memory_type");
  return type;
}

// Drops every domain's cached registrations overlapping [addr, addr + len).
inline void invalidate(const void* addr, size_t len) {
  detail::check(hmr_mem_invalidate(nullptr, addr, len), "hmr_mem_invalidate");
}

// Memory from hmr_mem_alloc, freed with hmr_mem_free when destroyed (a failure there is
// ignored; call free() where the outcome matters).  Move-only.
class DeviceMemory {
 public:
  DeviceMemory() noexcept = default;
  DeviceMemory(hmr_hmem_iface iface, uint64_t device, size_t len, hmr_mem_kind kind)
      : iface_(iface), len_(len) {
    detail::check(hmr_mem_alloc(iface, device, len, kind, &ptr_), "hmr_mem_alloc");
  }
  DeviceMemory(DeviceMemory&& other) noexcept
      : iface_(other.iface_), ptr_(other.ptr_), len_(other.len_) {
    other.ptr_ = nullptr;
  }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    if (this != &other) {
      if (ptr_ != nullptr) (void)hmr_mem_free(iface_, ptr_);
      iface_ = other.iface_;
      ptr_ = other.ptr_;
      len_ = other.len_;
      other.ptr_ = nullptr;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (ptr_ != nullptr) (void)hmr_mem_free(iface_, ptr_);
  }

  void free() {
    if (ptr_ == nullptr) return;
    detail::check(hmr_mem_free(iface_, ptr_), "hmr_mem_free");
    ptr_ = nullptr;
  }
  void* get() const noexcept { return ptr_; }
  size_t size() const noexcept { return len_; }
  hmr_hmem_iface iface() const noexcept { return iface_; }

 private:
  hmr_hmem_iface iface_ = HMR_HMEM_SYSTEM;
  void* ptr_ = nullptr;
  size_t len_ = 0;
};

}  // namespace hmr

#endif  // HMR_HMR_HPP
