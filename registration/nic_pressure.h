// A NIC that refuses a registration for lack of resources (keys, pinned memory) gets back
// what hmr holds idle at it, and the registration is tried again (docs/semantics.md, "Under
// pressure").  The registrar, the one door to the NIC, asks; the domain, which owns the
// caches that hold idle registrations, answers.  No lock is held on either side of the call:
// the registrar calls it where it would call the NIC, and the caches deregister after their
// writer mutex is released.
#pragma once

#include <cstddef>

#include <hmr/hmr.h>

namespace hmr::core {

// Which idle device registrations a want of file descriptors gives back.  Each dma-buf
// registration holds its allocation's export, shared by every registration of that
// allocation in any domain (hmem/dmabuf_share.h), and the export's fd closes only with its
// last holder: so first the registrations that hold an export alone (each gives back an fd),
// then any that hold one (a shared export closes once all of its holders, open MRs included,
// are gone; so some of these may give back nothing).  A host
// shadow or peer-direct registration holds no fd and is never given back for one.
enum class ExportRelief { sole_holders, any_holders };

// What a refusal ran short of, as far as hmr can tell.  hmr's own bound on pinned bytes
// (RLIMIT_MEMLOCK, the NIC's max_pinned) is cured only by registrations that pin host pages: a
// dma-buf or peer-direct registration of device memory pins none, and giving one back would
// cost its next user a new export and registration for nothing.  Anything else (the NIC's own
// refusal, which names no resource; hmr's count of registrations) is cured by any of them.
enum class Shortage { any, pinned_host_memory };

class NicPressureRelief {
 public:
  // Deregisters up to `count` registrations no MR uses whose giving back can cure `shortage`,
  // least recently used first, and any whose memory was freed; how many it gave back (0:
  // nothing idle is left).
  virtual size_t release_unused(size_t count, Shortage shortage) = 0;
  // Deregisters up to `count` idle device registrations (the device cache's) that hold their
  // allocations' dma-buf exports open, as `which` says: for an export refused for want of
  // descriptors.  How many it gave back.
  virtual size_t release_unused_exports(size_t count, ExportRelief which) = 0;

 protected:
  ~NicPressureRelief() = default;
};

// A refusal that freeing resources can cure: out of keys or entries (ENOSPC), out of memory
// to pin or for the NIC's tables (ENOMEM), try again (EAGAIN).  Verbs reports ENOMEM and
// EAGAIN from ibv_reg_mr, libfabric -FI_ENOMEM/-FI_ENOSPC/-FI_EAGAIN, callbacks HMR codes.
inline bool is_resource_refusal(int code) {
  return code == HMR_ENOSPC || code == HMR_ENOMEM || code == HMR_EAGAIN;
}

}  // namespace hmr::core
