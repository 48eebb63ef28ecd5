#include "nic/verbs/umr_queue.h"

#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "nic/verbs/verbs_error.h"
#include "util/log.h"

namespace hmr::verbs {
namespace {

// Bytes of one KLM entry in the inline UMR work request.
constexpr uint32_t kKlmBytes = 16;
// A UMR completes in microseconds; this only bounds a device that never answers.
constexpr auto kCompletionTimeout = std::chrono::seconds(5);

}  // namespace

const char* UmrQueue::missing_verb(const IbverbsSymbols& verbs) {
  if (verbs.create_cq == nullptr) return "ibv_create_cq";
  if (verbs.destroy_cq == nullptr) return "ibv_destroy_cq";
  if (verbs.modify_qp == nullptr) return "ibv_modify_qp";
  if (verbs.destroy_qp == nullptr) return "ibv_destroy_qp";
  if (verbs.query_port == nullptr) return "ibv_query_port";
  if (verbs.query_gid == nullptr) return "ibv_query_gid";
  if (verbs.qp_to_qp_ex == nullptr) return "ibv_qp_to_qp_ex (IBVERBS_1.6, rdma-core 24)";
  return nullptr;
}

Result<std::unique_ptr<UmrQueue>> UmrQueue::create(std::shared_ptr<const IbverbsLibrary> verbs,
                                                   std::shared_ptr<const Mlx5dvLibrary> mlx5,
                                                   ibv_context* context, ibv_pd* pd,
                                                   const std::string& device) {
  if (const char* missing = missing_verb(verbs->symbols())) {
    return make_error(HMR_ENOSYS, "the UMR queue needs %s, which %s lacks", missing,
                      verbs->path().c_str());
  }
  std::unique_ptr<UmrQueue> queue(
      new UmrQueue(std::move(verbs), std::move(mlx5), context, device));
  HMR_RETURN_IF_ERROR(queue->build(pd));
  return queue;
}

UmrQueue::UmrQueue(std::shared_ptr<const IbverbsLibrary> verbs,
                   std::shared_ptr<const Mlx5dvLibrary> mlx5, ibv_context* context,
                   std::string device)
    : verbs_(std::move(verbs)), mlx5_(std::move(mlx5)), context_(context),
      device_(std::move(device)) {}

UmrQueue::~UmrQueue() {
  const Status status = destroy();
  if (!status.ok()) log_message(LogLevel::warn, "%s", status.reason().c_str());
}

Status UmrQueue::destroy() {
  const IbverbsSymbols& verbs = verbs_->symbols();
  // ibv_destroy_qp and ibv_destroy_cq return an errno value (rdma-core verbs.h, "0 on
  // success, or the value of errno on failure"); the kernel refuses a CQ a QP still uses
  // (EBUSY, ib_destroy_cq_user's usecnt).
  if (qp_ != nullptr) {
    if (const int err = verbs.destroy_qp(qp_); err != 0) {
      return verbs_failure(err, "ibv_destroy_qp of the UMR queue's QP on %s failed (it and its "
                           "CQ stay on the device until its context is closed)",
                           device_.c_str());
    }
    qp_ = nullptr;
    qpx_ = nullptr;
    mqpx_ = nullptr;
  }
  if (cq_ != nullptr) {
    if (const int err = verbs.destroy_cq(cq_); err != 0) {
      return verbs_failure(err, "ibv_destroy_cq of the UMR queue's CQ on %s failed (it stays on "
                           "the device until its context is closed)", device_.c_str());
    }
    cq_ = nullptr;
  }
  return ok_status();
}

Status UmrQueue::build(ibv_pd* pd) {
  const IbverbsSymbols& verbs = verbs_->symbols();
  errno = 0;
  cq_ = verbs.create_cq(context_, 16, nullptr, nullptr, 0);
  if (cq_ == nullptr) {
    return verbs_failure(errno, "ibv_create_cq for the UMR queue on %s failed", device_.c_str());
  }
  ibv_qp_init_attr_ex init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kMaxEntries * kKlmBytes;
  init.qp_type = IBV_QPT_RC;
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = pd;
  mlx5dv_qp_init_attr dv{};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
  dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_LIST;
  errno = 0;
  qp_ = mlx5_->symbols().create_qp(context_, &init, &dv);
  if (qp_ == nullptr) {
    return verbs_failure(errno,
                         "mlx5dv_create_qp (RC, MLX5DV_QP_EX_WITH_MR_LIST, %u bytes inline) for "
                         "the UMR queue on %s failed",
                         init.cap.max_inline_data, device_.c_str());
  }
  qpx_ = verbs.qp_to_qp_ex(qp_);
  mqpx_ = qpx_ != nullptr ? mlx5_->symbols().qp_ex_from_ibv_qp_ex(qpx_) : nullptr;
  if (qpx_ == nullptr || mqpx_ == nullptr || qpx_->wr_start == nullptr ||
      qpx_->wr_complete == nullptr || qpx_->wr_abort == nullptr || mqpx_->wr_mr_list == nullptr) {
    return make_error(HMR_ENOSYS, "the UMR queue on %s has no work-request builders "
                      "(ibv_qp_to_qp_ex / mlx5dv_qp_ex_from_ibv_qp_ex / wr_mr_list)",
                      device_.c_str());
  }
  return connect(/*reset=*/false);
}

Status UmrQueue::connect(bool reset) {
  const IbverbsSymbols& verbs = verbs_->symbols();
  ibv_port_attr port{};
  if (const int err = verbs.query_port(context_, kPort, &port); err != 0) {
    return verbs_failure(err, "ibv_query_port(%s, %u) for the UMR queue failed", device_.c_str(),
                         kPort);
  }
  ibv_gid gid{};
  const bool ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (ethernet) {
    // ibv_query_gid returns -1 and sets errno (rdma-core verbs.c), unlike most verbs calls.
    errno = 0;  // (rdma-core may return -1 without setting it)
    if (verbs.query_gid(context_, kPort, 0, &gid) != 0) {
      const int err = errno != 0 ? errno : EIO;
      return verbs_failure(err, "ibv_query_gid(%s, port %u, index 0) for the UMR queue failed",
                           device_.c_str(), kPort);
    }
    static const ibv_gid kNoGid{};
    if (std::memcmp(&gid, &kNoGid, sizeof gid) == 0) {
      return make_error(HMR_EIO, "%s port %u has no GID at index 0 (no IP address on its "
                        "RoCE netdev?): the UMR queue's loopback connection cannot be made",
                        device_.c_str(), kPort);
    }
  }
  struct Step {
    ibv_qp_state state;
    int mask;
    const char* name;
  };
  ibv_qp_attr attr{};
  auto move_to = [&](const Step& step) -> Status {
    attr.qp_state = step.state;
    if (const int err = verbs.modify_qp(qp_, &attr, step.mask); err != 0) {
      return verbs_failure(err, "ibv_modify_qp of the UMR queue on %s to %s failed",
                           device_.c_str(), step.name);
    }
    return ok_status();
  };
  if (reset) HMR_RETURN_IF_ERROR(move_to({IBV_QPS_RESET, IBV_QP_STATE, "RESET"}));
  attr = {};
  attr.pkey_index = 0;
  attr.port_num = kPort;
  HMR_RETURN_IF_ERROR(move_to({IBV_QPS_INIT,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                               "INIT"}));
  // Connected to itself: the destination is this QP on this port.
  attr = {};
  attr.path_mtu = port.active_mtu != 0 ? port.active_mtu : IBV_MTU_1024;
  attr.dest_qp_num = qp_->qp_num;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = kPort;
  attr.ah_attr.dlid = port.lid;
  if (ethernet) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = gid;
    attr.ah_attr.grh.sgid_index = 0;
    attr.ah_attr.grh.hop_limit = 64;
  }
  HMR_RETURN_IF_ERROR(move_to({IBV_QPS_RTR,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER,
                               "RTR"}));
  attr = {};
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  HMR_RETURN_IF_ERROR(move_to({IBV_QPS_RTS,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                               "RTS"}));
  broken_ = false;
  return ok_status();
}

Status UmrQueue::fill(mlx5dv_mkey* mkey, unsigned int ibv_access, std::span<ibv_sge> entries) {
  if (entries.empty() || entries.size() > kMaxEntries) {
    return make_error(HMR_EINVAL, "a UMR of %zu KLM entries: the UMR queue posts 1 to %u",
                      entries.size(), kMaxEntries);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) HMR_RETURN_IF_ERROR(connect(/*reset=*/true));
  const uint64_t wr_id = ++next_wr_id_;
  qpx_->wr_id = wr_id;
  // mlx5 builds the KLM list only inline, and hmr waits for this very completion.
  qpx_->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  qpx_->wr_start(qpx_);
  mqpx_->wr_mr_list(mqpx_, mkey, ibv_access, static_cast<uint16_t>(entries.size()),
                    entries.data());
  if (const int err = qpx_->wr_complete(qpx_); err != 0) {
    return verbs_failure(err, "posting the UMR (mlx5dv_wr_mr_list, %zu entries) on %s failed",
                         entries.size(), device_.c_str());
  }
  return wait_for(wr_id);
}

Status UmrQueue::wait_for(uint64_t wr_id) {
  auto poll_cq = context_->ops.poll_cq;
  if (poll_cq == nullptr) {
    broken_ = true;
    return make_error(HMR_ENOSYS, "the provider of %s has no poll_cq", device_.c_str());
  }
  const auto deadline = std::chrono::steady_clock::now() + kCompletionTimeout;
  for (unsigned polls = 0;; ++polls) {
    ibv_wc wc{};
    const int found = poll_cq(cq_, 1, &wc);
    if (found < 0) {
      // ibv_poll_cq(3): "a negative value" on failure, with no errno.
      broken_ = true;
      return make_error(HMR_EIO, "ibv_poll_cq of the UMR queue's CQ on %s failed (returned %d)",
                        device_.c_str(), found);
    }
    if (found == 1 && wc.wr_id == wr_id) {
      if (wc.status == IBV_WC_SUCCESS) return ok_status();
      broken_ = true;
      return make_error(HMR_EIO, "the UMR filling the indirect key on %s completed with %s "
                        "(vendor error %#x)", device_.c_str(), describe_wc_status(wc.status).c_str(),
                        wc.vendor_err);
    }
    // Only this queue's own signalled UMRs complete here, one at a time; anything else is a
    // stale completion of an earlier, failed fill, and is dropped.
    if ((polls & 63) == 63) {
      if (std::chrono::steady_clock::now() > deadline) {
        broken_ = true;
        return make_error(HMR_EIO, "the UMR filling the indirect key on %s did not complete "
                          "within %lld s", device_.c_str(),
                          static_cast<long long>(kCompletionTimeout.count()));
      }
      sched_yield();
    }
  }
}

}  // namespace hmr::verbs
