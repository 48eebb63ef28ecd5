// hmem::Iface: what hmr needs from one memory runtime (CUDA, ROCr, Level Zero, ...).
//
// Every operation exists on every iface; one an implementation cannot do returns HMR_EOPNOTSUPP
// with a reason (see unsupported()), never a null function, so callers need no "is it there"
// checks and a missing feature always explains itself.
#pragma once

#include <hmr/hmr.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hmem/dmabuf_fd.h"
#include "util/status.h"

namespace hmr::hmem {

// A device as the caller names it in hmr_mr_attr.device for that iface: the CUDA ordinal, the
// Level Zero driver << 16 | device encoding, ...  Meaningful only together with the iface.
struct DeviceId {
  uint64_t value = 0;
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
};

enum class MemoryKind {
  host,         // ordinary process memory, not known to the runtime
  host_alloc,   // host memory allocated or registered through the runtime (pinned)
  device_only,  // device memory the CPU must never touch (HMR_HMEM_DEVICE_ONLY)
  managed,      // migratable memory: both may touch it, so it is never exported as dma-buf
};

const char* memory_kind_name(MemoryKind kind);

// What a pointer is: the answer to query(ptr, len).
struct PointerInfo {
  int iface = HMR_HMEM_SYSTEM;  // enum hmr_hmem_iface
  DeviceId device;
  uint64_t base = 0;       // start of the whole allocation that holds the pointer
  size_t alloc_len = 0;    // its length
  MemoryKind kind = MemoryKind::host;
  uint64_t alloc_id = 0;   // changes when the address is freed and reallocated: cache identity
  std::string sys_dev;     // where the memory sits: a PCI bus id ("0000:17:00.0") or NUMA node
  // Where the range spans several separately allocated pieces (CUDA VMM segments mapped back
  // to back in one reservation), each piece with its own identity, in address order; empty
  // when one piece holds it (then the piece is [base, +alloc_len) with alloc_id).  Pieces of
  // live memory never overlap, while the ranges registrations resolve to do (a buffer inside
  // segment 0 and one across segments 0 and 1 have the same base): the device monitor
  // records pieces, so that two such ranges are never taken for a free of each other.
  struct Piece {
    uint64_t base = 0;
    uint64_t length = 0;
    uint64_t alloc_id = 0;
  };
  std::vector<Piece> pieces;
};

// The part of PointerInfo that says which allocation a pointer is in (Iface::identify).
struct AllocationIdentity {
  int iface = HMR_HMEM_SYSTEM;
  uint64_t device = 0;
  uint64_t alloc_id = 0;
  MemoryKind kind = MemoryKind::host;
};

// A byte range a caller wants to hand to a NIC.
struct MemoryRange {
  const void* address = nullptr;
  size_t length = 0;
};

// A dma-buf export of a range.  Drivers export whole host pages, so the fd covers the
// page-rounded range and the requested bytes start `offset` bytes into it: a NIC registers
// (fd, offset, len), as in fi_mr_dmabuf and ibv_reg_dmabuf_mr.
struct DmabufExport {
  DmabufFd fd;
  uint64_t offset = 0;      // where the requested address lies inside the exported range
  size_t len = 0;           // the requested length
  size_t exported_len = 0;  // the page-rounded length the fd covers
};

// One yes/no answer; a "no" always carries why.
struct Capability {
  bool supported = false;
  std::string reason;  // empty when supported

  // The only two answers every iface gives; no() takes the reason so a "no" cannot lack one.
  static Capability yes() { return Capability{true, {}}; }
  static Capability no(std::string why) { return Capability{false, std::move(why)}; }
};

struct DeviceCapabilities {
  DeviceId device;
  Capability dmabuf;       // export_dmabuf works for this device's memory
  Capability peer_direct;  // the NIC can register the device VA directly (nvidia-peermem)
  Capability ipc;          // the memory can be shared with another process
  // Where the device sits, for hmr-info and NIC affinity: its PCI bus id ("0000:17:00.0"),
  // or "" when the runtime does not say.  Defaulted so existing initialisers stay complete.
  std::string sys_dev = {};
};

class Iface {
 public:
  virtual ~Iface() = default;

  virtual int iface() const = 0;  // enum hmr_hmem_iface
  virtual const char* name() const = 0;

  // Loads and initialises the runtime.  Fails closed with a reason naming the library and the
  // runtime's error; until it succeeds every other call fails.  Called once, before the iface is
  // shared between threads.
  virtual Status init() = 0;

  virtual Result<int> device_count() = 0;
  // The ids of every device, as callers name them in hmr_mr_attr.device.  0..count-1 unless
  // the runtime encodes them (Level Zero: driver << 16 | device).
  virtual Result<std::vector<DeviceId>> device_ids();

  // What [ptr, ptr + len) is.  HMR_ENOENT means "not this iface's memory" (not_its_memory()),
  // and the registry asks the next iface; every other failure is final (fail closed).  The
  // range must lie inside one allocation.  The CPU never touches the memory.
  virtual Result<PointerInfo> query(const void* ptr, size_t len) = 0;
  // query()'s HMR_ENOENT, with a fixed `reason` ("not CUDA memory").  It is what a runtime
  // answers for most pointers it is asked about (every miss of host memory asks each loaded
  // runtime), so it is made without formatting or logging, and up to 15 characters without
  // allocating (std::string's inline buffer).  The registry never shows it (it asks the next
  // runtime); callers that report it write their own message with the address.
  static Status not_its_memory(const char* reason) { return Status(HMR_ENOENT, reason); }
  // What query() says of the allocation's identity, for the device cache's hit path
  // (Domain::try_device_hit), with at most one call into the runtime and nothing allocated: a
  // range across allocations need not be noticed (the cache entry it is matched against was
  // checked whole when it was made).  The alloc_id is query()'s for a range inside one
  // allocation (a range query() identifies by a mix of several may get another answer here:
  // that is a miss, never a wrong hit).  HMR_ENOENT as query()'s.
  virtual Status identify(const void* ptr, size_t len, AllocationIdentity& out) {
    Result<PointerInfo> info = query(ptr, len);
    if (!info.ok()) return info.status();
    out = {info->iface, info->device.value, info->alloc_id, info->kind};
    return ok_status();
  }

  virtual Result<DmabufExport> export_dmabuf(MemoryRange range) {
    (void)range;
    return unsupported("dma-buf export");
  }

  // Before the NIC reaches `memory` directly (dma-buf or peer-direct): asks the runtime to
  // finish a synchronous copy into it before the copy returns, so bytes the application saw
  // copied are there when a peer reads them (CUDA: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, which the
  // GPUDirect RDMA guide sets before pinning; otherwise such copies may return early).  Best
  // effort: a runtime that cannot (CUDA's VMM memory) is left as it is.
  virtual void order_copies_for_nic(const PointerInfo& memory) { (void)memory; }

  // Per device, never "device 0 for all": devices of one runtime differ.
  virtual Result<DeviceCapabilities> capabilities(DeviceId device) = 0;

  // Copies between host memory and memory of this iface (device, host-alloc or managed).
  // Used by host-shadow registrations and by tests; the CPU never reads device memory itself.
  virtual Status copy_to_device(void* device_dst, const void* host_src, size_t len) {
    (void)device_dst, (void)host_src, (void)len;
    return unsupported("copies to the device");
  }
  virtual Status copy_from_device(void* host_dst, const void* device_src, size_t len) {
    (void)host_dst, (void)device_src, (void)len;
    return unsupported("copies from the device");
  }

  // Pins host memory for the runtime's DMA engines (cuMemHostRegister, hsa_amd_memory_lock).
  virtual Status host_register(void* ptr, size_t len) {
    (void)ptr, (void)len;
    return unsupported("host registration");
  }
  virtual Status host_unregister(void* ptr) {
    (void)ptr;
    return unsupported("host unregistration");
  }

  // Allocates memory of `kind` (device_only, host_alloc or managed) on `device`, as UCX's
  // mem_alloc does; for tests, hmr-perftest and applications that want hmr to own the buffer.
  virtual Result<void*> mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
    (void)device, (void)len, (void)kind;
    return unsupported("memory allocation");
  }
  virtual Status mem_free(void* ptr) {
    (void)ptr;
    return unsupported("memory free");
  }

  // How the registration cache learns that memory of this iface was freed.
  //   alloc_id:     query() returns an identity that changes on free + realloc (CUDA BUFFER_ID,
  //                 Level Zero allocation id); the cache keys entries by it, so a new allocation
  //                 at the same address can never hit an old entry.
  //   free_events:  watch_free() delivers a callback when the allocation is freed (ROCr).
  //   explicit_only: the runtime reports nothing (Neuron, SynapseAI); the application must call
  //                 hmr's explicit invalidation before freeing, as documented.
  enum class FreeTracking { none, alloc_id, free_events, explicit_only };
  virtual FreeTracking free_tracking() const { return FreeTracking::none; }

  // free_events only: calls on_free(context, base, alloc_len) once when the allocation that
  // `info` describes is freed, on whatever thread frees it.  The callback must not call back into
  // the runtime.  unwatch_free() stops it; both are idempotent per (info.base, context).
  using FreeCallback = void (*)(void* context, uint64_t base, size_t alloc_len);
  virtual Status watch_free(const PointerInfo& info, FreeCallback on_free, void* context) {
    (void)info, (void)on_free, (void)context;
    return unsupported("free notifications");
  }
  virtual Status unwatch_free(const PointerInfo& info, void* context) {
    (void)info, (void)context;
    return unsupported("free notifications");
  }

  // For hmr-info: the library init loaded ("" before or when it failed) and the runtime's
  // version as the runtime words it ("" when unknown).
  virtual std::string library_path() const { return {}; }
  virtual std::string runtime_version() const { return {}; }

 protected:
  // The typed "not supported" every iface uses for an operation it lacks.
  Status unsupported(const char* operation) const;
};

}  // namespace hmr::hmem
