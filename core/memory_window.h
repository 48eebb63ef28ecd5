// MemoryWindow: an hmr_mw, a key onto part of an MR registered with HMR_MW_BIND that can be
// moved or revoked without touching the MR (verbs' memory windows).  The NIC does the binding;
// this object keeps the rules every NIC shares — the MR is of the same domain and grants what
// the window asks, a type 2 window is invalidated before it is bound again — and holds the MR
// while bound, so the MR cannot close or re-register under a live window key.
#pragma once

#include <hmr/hmr.h>

#include <mutex>

#include "nic/nic.h"
#include "util/object.h"
#include "util/status.h"

namespace hmr::core {

class Domain;
class MemoryRegion;

class MemoryWindow : public Tagged<ObjectClass::memory_window> {
 public:
  // `type`: the bits of the caller's enum hmr_mw_type, any int (checked here).
  static Result<MemoryWindow*> allocate(Domain& domain, int type);
  // Deallocates on the NIC (which unbinds it) and deletes the object.
  Status close();

  // `post` may be null: no queue (the sim NIC), a signaled work request with wr_id 0.
  Result<uint64_t> bind(MemoryRegion& mr, uintptr_t addr, size_t len, uint64_t access,
                        const hmr_mw_post* post);
  Status invalidate(const hmr_mw_post* post);

 private:
  MemoryWindow(Domain& domain, const nic::MemoryWindow& window)
      : domain_(domain), window_(window) {}
  ~MemoryWindow() = default;
  void hold(MemoryRegion* mr);  // drops the MR held so far; caller holds mutex_

  Domain& domain_;
  std::mutex mutex_;  // one operation on the window at a time, as a QP orders them
  nic::MemoryWindow window_;
  MemoryRegion* bound_ = nullptr;  // the MR of the current binding
};

}  // namespace hmr::core
