#include "core/memory_window.h"

#include "core/domain.h"
#include "core/memory_region.h"

namespace hmr::core {
namespace {

using ull = unsigned long long;

constexpr uint64_t kWindowAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

struct Posting {
  void* queue = nullptr;
  uint64_t wr_id = 0;
  bool signaled = true;
};

Posting posting_of(const hmr_mw_post* post) {
  Posting posting;
  if (post != nullptr) {
    posting.queue = post->queue;
    posting.wr_id = post->wr_id;
    posting.signaled = post->unsignaled == 0;
  }
  return posting;
}

}  // namespace

Result<MemoryWindow*> MemoryWindow::allocate(Domain& domain, int type) {
  if (type != HMR_MW_TYPE_1 && type != HMR_MW_TYPE_2) {
    return make_error(HMR_EINVAL, "memory window type %d: use HMR_MW_TYPE_1 or HMR_MW_TYPE_2",
                      type);
  }
  // (Also where the domain's keys are narrower than the NIC's window keys: hmr_md_query_op
  // says so too.)
  const nic::Support available = domain.operation_support(HMR_MD_OP_MEMORY_WINDOWS);
  if (!available.available) return make_error(HMR_ENOSYS, "%s", available.reason.c_str());
  // (through the registrar: the window's key may come from the registrations' table)
  Result<nic::MemoryWindow> window = domain.nic_registrar().alloc_window(
      type == HMR_MW_TYPE_1 ? nic::WindowType::type1 : nic::WindowType::type2);
  if (!window.ok()) return window.status();
  MemoryWindow* made = nullptr;
  try {
    made = new MemoryWindow(domain, *window);
  } catch (...) {  // (no memory for the object: the NIC's window goes back, nothing is counted)
    (void)domain.nic().dealloc_window(*window);
    throw;
  }
  domain.object_opened();
  return made;
}

Status MemoryWindow::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    HMR_RETURN_IF_ERROR(domain_.nic().dealloc_window(window_));
    hold(nullptr);
  }
  domain_.object_closed();
  delete this;
  return ok_status();
}

Result<uint64_t> MemoryWindow::bind(MemoryRegion& mr, uintptr_t addr, size_t len, uint64_t access,
                                    const hmr_mw_post* post) {
  if (&mr.domain() != &domain_) {
    return make_error(HMR_EINVAL, "the MR belongs to another domain than the window");
  }
  if (access == 0 || (access & ~kWindowAccess) != 0) {
    return make_error(HMR_EINVAL, "a window's access is HMR_REMOTE_READ and/or HMR_REMOTE_WRITE "
                      "(got %#llx)", static_cast<ull>(access));
  }
  if (addr == 0 || len == 0 || addr + len < addr || !mr.contains(addr, len)) {
    return make_error(HMR_EINVAL, "window range [%#llx, +%zu) is not inside the MR",
                      static_cast<ull>(addr), len);
  }
  HMR_RETURN_IF_ERROR(mr.check_registered());
  const uint64_t granted = mr.request().access;
  if ((granted & HMR_MW_BIND) == 0) {
    return make_error(HMR_EINVAL, "the MR was registered without HMR_MW_BIND access; windows "
                                  "cannot be bound to it");
  }
  if ((granted & access) != access) {
    return make_error(HMR_EACCES, "the window asks for access %#llx, its MR grants %#llx",
                      static_cast<ull>(access), static_cast<ull>(granted & kWindowAccess));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (bound_ != nullptr && window_.type == nic::WindowType::type2) {
    return make_error(HMR_EBUSY, "a type 2 window is bound; invalidate it before binding it again");
  }
  const Posting posting = posting_of(post);
  nic::WindowBind request;
  request.registration = &mr.registration();
  request.addr = addr;
  request.len = len;
  request.access = access;
  request.queue = posting.queue;
  request.work_request_id = posting.wr_id;
  request.signaled = posting.signaled;
  HMR_RETURN_IF_ERROR(domain_.nic().bind_window(window_, request));
  hold(&mr);
  return window_.key.low_u64();
}

Status MemoryWindow::invalidate(const hmr_mw_post* post) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bound_ == nullptr) return make_error(HMR_EINVAL, "the memory window is not bound");
  const Posting posting = posting_of(post);
  HMR_RETURN_IF_ERROR(
      domain_.nic().invalidate_window(window_, posting.queue, posting.wr_id, posting.signaled));
  hold(nullptr);
  return ok_status();
}

void MemoryWindow::hold(MemoryRegion* mr) {
  if (mr == bound_) return;
  if (mr != nullptr) mr->add_user();
  if (bound_ != nullptr) bound_->drop_user();
  bound_ = mr;
}

}  // namespace hmr::core
