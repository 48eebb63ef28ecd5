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

#include "core/status.h"
#include "hmem/dmabuf_fd.h"

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
};

struct DeviceCapabilities {
  DeviceId device;
  Capability dmabuf;       // export_dmabuf works for this device's memory
  Capability peer_direct;  // the NIC can register the device VA directly (nvidia-peermem)
  Capability ipc;          // the memory can be shared with another process
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

  // What [ptr, ptr + len) is.  HMR_ENOENT means "not this iface's memory", and the registry
  // asks the next iface; every other failure is final (fail closed).  The range must lie inside
  // one allocation.  The CPU never touches the memory.
  virtual Result<PointerInfo> query(const void* ptr, size_t len) = 0;

  virtual Result<DmabufExport> export_dmabuf(MemoryRange range) {
    (void)range;
    return unsupported("dma-buf export");
  }

  // Per device, never "device 0 for all": devices of one runtime differ.
  virtual Result<DeviceCapabilities> capabilities(DeviceId device) = 0;

 protected:
  // The typed "not supported" every iface uses for an operation it lacks.
  Status unsupported(const char* operation) const;
};

}  // namespace hmr::hmem
