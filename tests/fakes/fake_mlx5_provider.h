/* How the fake libmlx5 (fake_mlx5.c, built as libmlx5.so.1) reaches the fake libibverbs that
 * made an object, as the real libmlx5 is the provider behind the objects it is handed: every
 * device of the fake libibverbs carries a table of its mlx5 direct-verbs entry points, and every
 * mlx5dv entry point finds that table through the object it gets (a device, or the context of a
 * PD or QP, or the mkey itself).  So the two fakes share no symbols and no link: whichever fake
 * libibverbs made the objects answers for them.
 *
 * Built on rdma-core's headers where installed (as a provider is), on hmr's own declarations of
 * the ABI elsewhere or when FAKE_IBVERBS_OWN_ABI is defined. */
#ifndef HMR_TESTS_FAKE_MLX5_PROVIDER_H
#define HMR_TESTS_FAKE_MLX5_PROVIDER_H

#include <stdbool.h>
#include <stdint.h>

#if __has_include(<infiniband/verbs.h>) && __has_include(<infiniband/mlx5dv.h>) && \
    !defined(FAKE_IBVERBS_OWN_ABI)
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#define FAKE_OPTIONAL_ACCESS IBV_ACCESS_OPTIONAL_RANGE
#define FAKE_ABI_IS_EXTENDED __VERBS_ABI_IS_EXTENDED
#define FAKE_COMPAT_PORT_ATTR 1
#else
#include "nic/verbs/mlx5dv_abi.h"
#include "nic/verbs/verbs_abi.h"
#include "nic/verbs/verbs_qp_abi.h"
#define FAKE_OPTIONAL_ACCESS HMR_IBV_ACCESS_OPTIONAL_RANGE
#define FAKE_ABI_IS_EXTENDED HMR_VERBS_ABI_IS_EXTENDED
#endif

struct fake_mlx5_ops {
  bool (*is_supported)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device, struct mlx5dv_context_attr *attr);
  struct ibv_qp *(*create_qp)(struct ibv_context *context, struct ibv_qp_init_attr_ex *qp_attr,
                              struct mlx5dv_qp_init_attr *mlx5_qp_attr);
  struct mlx5dv_qp_ex *(*qp_ex_from_ibv_qp_ex)(struct ibv_qp_ex *qp);
  struct mlx5dv_mkey *(*create_mkey)(struct mlx5dv_mkey_init_attr *attr);
  int (*destroy_mkey)(struct mlx5dv_mkey *mkey);
};

/* A device of the fake libibverbs: what applications see, then the provider's table. */
struct fake_device {
  struct ibv_device device;
  const struct fake_mlx5_ops *mlx5;
};

/* An mkey of the fake: what callers see, then the table that destroys it. */
struct fake_mkey_head {
  struct mlx5dv_mkey mkey;
  const struct fake_mlx5_ops *mlx5;
};

#endif
