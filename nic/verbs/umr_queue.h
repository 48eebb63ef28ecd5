// The verbs adapter's own queue pair for UMR work requests: how mlx5 fills an indirect mkey with
// its list of (lkey, address, length) entries (a KLM list).  One RC QP, connected to itself on
// port 1 of the device, created through mlx5dv_create_qp with MLX5DV_QP_EX_WITH_MR_LIST, with a
// completion queue of its own, as UCX's mlx5 memory domain keeps a UMR QP beside the
// application's QPs.  The application never sees it.
//
// Posts are serialised by one mutex, and each fill waits for its own completion by polling the
// CQ, so hmr_mr_reg_indirect returns once the key works, as ibv_reg_mr does.  A completion in
// error moves an RC QP to the error state; the queue then reconnects it (RESET, INIT, RTR, RTS)
// before the next fill.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "nic/verbs/ibverbs_library.h"
#include "nic/verbs/mlx5dv_library.h"
#include "nic/verbs/verbs_symbols.h"
#include "util/status.h"

namespace hmr::verbs {

class UmrQueue {
 public:
  // KLM entries one inline UMR work request carries (16 bytes each; the QP's max_inline_data is
  // sized for them).  mlx5's default WQE holds 4; more need the larger inline size asked for.
  static constexpr uint16_t kMaxEntries = 16;
  static constexpr uint8_t kPort = 1;

  // The verb (of those the queue needs) that `verbs` lacks, or null.
  static const char* missing_verb(const IbverbsSymbols& verbs);
  // HMR_ENOSYS naming the first verb libibverbs lacks; otherwise the failing verb's reason.
  static Result<std::unique_ptr<UmrQueue>> create(std::shared_ptr<const IbverbsLibrary> verbs,
                                                  std::shared_ptr<const Mlx5dvLibrary> mlx5,
                                                  ibv_context* context, ibv_pd* pd,
                                                  const std::string& device);
  UmrQueue(const UmrQueue&) = delete;
  UmrQueue& operator=(const UmrQueue&) = delete;
  // destroy(), logging a refusal.
  ~UmrQueue();

  // Destroys the QP, then its CQ; the first refusal, naming the verb and its errno, with what
  // it left on the device (a CQ is not destroyed while the QP that uses it is there).  What
  // is left is tried again by the next call; closing the device context destroys it anyway.
  Status destroy();

  // Posts mlx5dv_wr_mr_list(mkey, access, entries) and waits for its completion.
  Status fill(mlx5dv_mkey* mkey, unsigned int ibv_access, std::span<ibv_sge> entries);

 private:
  UmrQueue(std::shared_ptr<const IbverbsLibrary> verbs, std::shared_ptr<const Mlx5dvLibrary> mlx5,
           ibv_context* context, std::string device);
  Status build(ibv_pd* pd);
  // RESET (when `reset`), then INIT, RTR with itself as the destination, and RTS.
  Status connect(bool reset);
  Status wait_for(uint64_t wr_id);

  std::shared_ptr<const IbverbsLibrary> verbs_;
  std::shared_ptr<const Mlx5dvLibrary> mlx5_;
  ibv_context* context_;
  std::string device_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_qp_ex* qpx_ = nullptr;
  mlx5dv_qp_ex* mqpx_ = nullptr;
  std::mutex mutex_;
  uint64_t next_wr_id_ = 0;
  bool broken_ = false;  // a completion in error: reconnect before the next post
};

}  // namespace hmr::verbs
