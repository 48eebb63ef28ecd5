/* The part of rdma-core's mlx5 direct-verbs ABI (libmlx5.so.1, <infiniband/mlx5dv.h>) that hmr
 * uses for indirect keys: a DEVX context, an indirect mkey, a QP that can post UMR work requests
 * (MLX5DV_QP_EX_WITH_MR_LIST) and the wr_mr_list builder that fills the mkey with a KLM list.
 * Layouts and values follow rdma-core 44; tests/nic/verbs_abi_test.cpp compares them with the
 * real header where it is installed.  Plain C as well as C++, like verbs_abi.h. */
#ifndef HMR_NIC_VERBS_MLX5DV_ABI_H
#define HMR_NIC_VERBS_MLX5DV_ABI_H

#include "nic/verbs/verbs_qp_abi.h"

#ifdef __cplusplus
namespace hmr::verbs {
#endif

enum mlx5dv_context_attr_flags { MLX5DV_CONTEXT_FLAGS_DEVX = 1 << 0 };
enum mlx5dv_mkey_init_attr_flags { MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT = 1 << 0 };
enum mlx5dv_qp_init_attr_mask { MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS = 1 << 2 };
enum mlx5dv_qp_create_send_ops_flags { MLX5DV_QP_EX_WITH_MR_LIST = 1 << 1 };

struct mlx5dv_context_attr {
  uint32_t flags;
  uint64_t comp_mask;
};

struct mlx5dv_mkey_init_attr {
  struct ibv_pd* pd;
  uint32_t create_flags;
  uint16_t max_entries; /* in: entries asked for; out: entries the mkey has */
};

struct mlx5dv_mkey {
  uint32_t lkey;
  uint32_t rkey;
};

/* struct mlx5dv_dc_init_attr: a DC type and a union of 8 bytes; hmr creates no DC QPs. */
struct hmr_mlx5dv_dc_init_attr {
  int dc_type;
  uint64_t dct_access_key_or_streams;
};

struct mlx5dv_qp_init_attr {
  uint64_t comp_mask;
  uint32_t create_flags;
  struct hmr_mlx5dv_dc_init_attr dc_init_attr;
  uint64_t send_ops_flags;
};

/* hmr calls wr_mr_list; the other builders are placeholders of the same size. */
struct mlx5dv_qp_ex {
  uint64_t comp_mask;
  hmr_ibv_unused_fn wr_set_dc_addr;
  hmr_ibv_unused_fn wr_mr_interleaved;
  void (*wr_mr_list)(struct mlx5dv_qp_ex* mqp, struct mlx5dv_mkey* mkey, uint32_t access_flags,
                     uint16_t num_sges, struct ibv_sge* sge);
  hmr_ibv_unused_fn after_wr_mr_list[9];
};

#ifdef __cplusplus
}  // namespace hmr::verbs
#endif

#endif
