// An indirect key on mlx5: an mkey made by mlx5dv_create_mkey(MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT)
// that the UMR queue fills with a KLM list.  It owns the mkey (destroyed once, by destroy() or
// the destructor) and a struct ibv_mr that names it for hmr_verbs_desc: context, PD, address 0,
// the key's length, and the mkey's lkey and rkey.  That ibv_mr is hmr's, not an MR of
// libibverbs: work requests may use its lkey, ibv_dereg_mr must never see it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nic/verbs/mlx5dv_library.h"
#include "util/status.h"

namespace hmr::verbs {

class IndirectMkey {
 public:
  // An mkey of `pd` with room for at least `entries` KLM entries.  mlx5dv_create_mkey needs a
  // context opened with MLX5DV_CONTEXT_FLAGS_DEVX; the reason says so when it fails.
  static Result<std::unique_ptr<IndirectMkey>> create(std::shared_ptr<const Mlx5dvLibrary> mlx5,
                                                      ibv_pd* pd, uint16_t entries,
                                                      uint64_t length, const std::string& device);
  IndirectMkey(const IndirectMkey&) = delete;
  IndirectMkey& operator=(const IndirectMkey&) = delete;
  ~IndirectMkey();

  // On failure the mkey stays owned (a later call or the destructor tries again).
  Status destroy();

  mlx5dv_mkey* mkey() const { return mkey_; }
  ibv_mr* view() { return &view_; }

 private:
  IndirectMkey(std::shared_ptr<const Mlx5dvLibrary> mlx5, mlx5dv_mkey* mkey, ibv_pd* pd,
               uint64_t length, std::string device);

  std::shared_ptr<const Mlx5dvLibrary> mlx5_;
  mlx5dv_mkey* mkey_;
  ibv_mr view_{};
  std::string device_;
};

}  // namespace hmr::verbs
