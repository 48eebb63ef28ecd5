// Memory windows on the verbs adapter: allocation in the adapter's PD, binding to part of one
// registration chunk, invalidation and deallocation.
//
// Type 1 windows are bound with the bind_mw verb and unbound by a zero-length bind; type 2
// windows are bound with an IBV_WR_BIND_MW work request and invalidated with IBV_WR_LOCAL_INV.
// Either way the operation is posted to the application's QP and completes on its CQ: hmr only
// posts, the application reaps.  Every bind hands out a new rkey (its low byte incremented), so
// a key of an earlier binding stops working.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nic/nic.h"
#include "nic/verbs/verbs_registration.h"
#include "util/status.h"

namespace hmr::verbs {

class VerbsWindow {
 public:
  static Result<std::unique_ptr<VerbsWindow>> allocate(ibv_pd* pd, nic::WindowType type,
                                                       const std::string& device);
  VerbsWindow(const VerbsWindow&) = delete;
  VerbsWindow& operator=(const VerbsWindow&) = delete;
  // Deallocates a window still allocated (the failure paths of its owner).
  ~VerbsWindow();

  Status bind(const VerbsRegistration& registration, const nic::WindowBind& request);
  Status invalidate(void* queue, uint64_t work_request_id, bool signaled);
  // On failure the window stays allocated and owned.
  Status deallocate();

  uint32_t rkey() const { return rkey_; }
  bool bound() const { return bound_; }
  nic::WindowType type() const { return type_; }

 private:
  VerbsWindow(ibv_mw* mw, nic::WindowType type, std::string device);
  Status check_queue(void* queue) const;

  ibv_mw* mw_ = nullptr;
  nic::WindowType type_;
  std::string device_;
  uint32_t rkey_ = 0;
  bool bound_ = false;
  ibv_mr* bound_mr_ = nullptr;  // a type 1 window's MR while bound: its unbind names it
};

}  // namespace hmr::verbs
