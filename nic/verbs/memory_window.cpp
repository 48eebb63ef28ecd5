#include "nic/verbs/memory_window.h"

#include <hmr/hmr.h>

#include <cerrno>

#include "nic/verbs/provider_ops.h"
#include "nic/verbs/verbs_access.h"
#include "nic/verbs/verbs_error.h"
#include "util/log.h"

namespace hmr::verbs {
namespace {

// The next key of a window: the same index with the next 8-bit tag (ibv_inc_rkey).
uint32_t next_rkey(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xffu); }

unsigned int send_flags(bool signaled) { return signaled ? IBV_SEND_SIGNALED : 0; }

}  // namespace

Result<std::unique_ptr<VerbsWindow>> VerbsWindow::allocate(ibv_pd* pd, nic::WindowType type,
                                                           const std::string& device) {
  if (type != nic::WindowType::type1 && type != nic::WindowType::type2) {
    return make_error(HMR_EINVAL, "memory window type %d: use 1 or 2", static_cast<int>(type));
  }
  errno = 0;
  ibv_mw* mw = alloc_mw(pd, type == nic::WindowType::type1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
  if (mw == nullptr) {
    return verbs_failure(errno, "ibv_alloc_mw(type %d) on %s failed", static_cast<int>(type),
                         device.c_str());
  }
  return std::unique_ptr<VerbsWindow>(new VerbsWindow(mw, type, device));
}

VerbsWindow::VerbsWindow(ibv_mw* mw, nic::WindowType type, std::string device)
    : mw_(mw), type_(type), device_(std::move(device)), rkey_(mw->rkey) {}

VerbsWindow::~VerbsWindow() {
  if (mw_ == nullptr) return;
  Status status = deallocate();
  if (!status.ok()) log_message(LogLevel::warn, "%s", status.reason().c_str());
}

Status VerbsWindow::check_queue(void* queue) const {
  if (queue == nullptr) {
    return make_error(HMR_EINVAL, "a memory window operation is posted to a QP: pass the "
                      "struct ibv_qp * it goes to");
  }
  if (qp_context(static_cast<ibv_qp*>(queue)) != mw_->context) {
    return make_error(HMR_EINVAL, "the QP %p belongs to another device context than the memory "
                      "window (%s)", queue, device_.c_str());
  }
  // (The QP's protection domain is not compared with the window's: a QP made on a parent
  // domain (ibv_alloc_parent_domain, as UCX makes them) names the parent there, and a valid
  // bind would be refused.  A bind from a QP of another PD completes in error.)
  return ok_status();
}

Status VerbsWindow::bind(const VerbsRegistration& registration, const nic::WindowBind& request) {
  HMR_RETURN_IF_ERROR(check_queue(request.queue));
  if ((request.access & ~(HMR_REMOTE_READ | HMR_REMOTE_WRITE)) != 0 || request.access == 0) {
    return make_error(HMR_EINVAL, "a memory window's access is HMR_REMOTE_READ and/or "
                      "HMR_REMOTE_WRITE (got %#llx)",
                      static_cast<unsigned long long>(request.access));
  }
  if (registration.unusable()) {
    return make_error(HMR_EIO, "the registration failed to re-register; close it");
  }
  if ((registration.layout().ibv_access & IBV_ACCESS_MW_BIND) == 0) {
    return make_error(HMR_EINVAL, "the registration was made without memory-window binding "
                      "(register the MR with HMR_MW_BIND access)");
  }
  ibv_mr* mr = registration.chunk_holding(request.addr, request.len);
  if (mr != nullptr && mr->pd != mw_->pd) {  // (a re-registration moved it to another PD)
    return make_error(HMR_EINVAL, "the registration is in another protection domain than the "
                      "memory window (%s): a window binds an MR of its own PD", device_.c_str());
  }
  if (mr == nullptr) {
    return make_error(HMR_EINVAL,
                      "window range [%#llx, +%llu) is not inside one chunk of the registration "
                      "[%#llx, +%llu) (chunks of %llu bytes)",
                      static_cast<unsigned long long>(request.addr),
                      static_cast<unsigned long long>(request.len),
                      static_cast<unsigned long long>(registration.layout().start),
                      static_cast<unsigned long long>(registration.layout().length),
                      static_cast<unsigned long long>(registration.layout().chunk_len));
  }
  // Peers address the window as they address the registration: VA or offset from its start.
  const uint64_t window_addr =
      registration.layout().iova + (request.addr - registration.layout().start);
  ibv_mw_bind_info info{mr, window_addr, request.len, ibv_window_access_for(request.access)};
  auto* qp = static_cast<ibv_qp*>(request.queue);
  if (type_ == nic::WindowType::type1) {
    ibv_mw_bind bind{request.work_request_id, send_flags(request.signaled), info};
    if (const int err = bind_mw(qp, mw_, &bind); err != 0) {
      return verbs_failure(err, "ibv_bind_mw on %s failed", device_.c_str());
    }
    rkey_ = mw_->rkey;  // the provider writes the new key into the window
    bound_mr_ = mr;
  } else {
    ibv_send_wr wr{};
    wr.wr_id = request.work_request_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = send_flags(request.signaled);
    wr.bind_mw.mw = mw_;
    wr.bind_mw.rkey = next_rkey(rkey_);
    wr.bind_mw.bind_info = info;
    ibv_send_wr* bad = nullptr;
    if (const int err = post_send(qp, &wr, &bad); err != 0) {
      return verbs_failure(err, "posting IBV_WR_BIND_MW on %s failed", device_.c_str());
    }
    rkey_ = wr.bind_mw.rkey;
  }
  bound_ = true;
  return ok_status();
}

Status VerbsWindow::invalidate(void* queue, uint64_t work_request_id, bool signaled) {
  HMR_RETURN_IF_ERROR(check_queue(queue));
  if (!bound_) return make_error(HMR_EINVAL, "the memory window is not bound");
  auto* qp = static_cast<ibv_qp*>(queue);
  if (type_ == nic::WindowType::type1) {
    // A zero-length bind unbinds a type 1 window.  It names the MR it was bound to (which the
    // binding keeps open), not NULL: irdma's bind_mw reads the MR even to unbind, and crashes
    // on NULL; rdma-core's own tests unbind this way, and mlx5 takes it too.
    ibv_mw_bind unbind{work_request_id, send_flags(signaled), {bound_mr_, 0, 0, 0}};
    if (const int err = bind_mw(qp, mw_, &unbind); err != 0) {
      return verbs_failure(err, "unbinding a type 1 memory window on %s failed", device_.c_str());
    }
    rkey_ = mw_->rkey;
  } else {
    ibv_send_wr wr{};
    wr.wr_id = work_request_id;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = send_flags(signaled);
    wr.invalidate_rkey = rkey_;
    ibv_send_wr* bad = nullptr;
    if (const int err = post_send(qp, &wr, &bad); err != 0) {
      return verbs_failure(err, "posting IBV_WR_LOCAL_INV for rkey %#x on %s failed", rkey_,
                           device_.c_str());
    }
  }
  bound_ = false;
  bound_mr_ = nullptr;
  return ok_status();
}

Status VerbsWindow::deallocate() {
  if (mw_ == nullptr) return ok_status();
  if (const int err = dealloc_mw(mw_); err != 0) {
    return verbs_failure(err, "ibv_dealloc_mw on %s failed", device_.c_str());
  }
  mw_ = nullptr;
  bound_ = false;
  bound_mr_ = nullptr;
  return ok_status();
}

}  // namespace hmr::verbs
