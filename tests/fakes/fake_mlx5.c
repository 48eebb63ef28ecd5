/* A fake libmlx5: a real shared object named libmlx5.so.1 that exports the mlx5 direct verbs
 * hmr's verbs adapter uses for indirect keys, at rdma-core's symbol versions (fake_mlx5.map).
 * Each entry point hands the call to the fake libibverbs behind the object it gets
 * (fake_mlx5_provider.h); that fake keeps the state, checks and records. */
#include <errno.h>
#include <stddef.h>

#include "fake_mlx5_provider.h"

#define EXPORT __attribute__((visibility("default")))

static const struct fake_mlx5_ops *ops_of(struct ibv_device *device) {
  return device != NULL ? ((struct fake_device *)(void *)device)->mlx5 : NULL;
}

EXPORT bool mlx5dv_is_supported(struct ibv_device *device) {
  const struct fake_mlx5_ops *ops = ops_of(device);
  return ops != NULL && ops->is_supported(device);
}

EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
                                              struct mlx5dv_context_attr *attr) {
  const struct fake_mlx5_ops *ops = ops_of(device);
  if (ops == NULL) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return ops->open_device(device, attr);
}

EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
                                       struct ibv_qp_init_attr_ex *qp_attr,
                                       struct mlx5dv_qp_init_attr *mlx5_qp_attr) {
  const struct fake_mlx5_ops *ops = context != NULL ? ops_of(context->device) : NULL;
  if (ops == NULL) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return ops->create_qp(context, qp_attr, mlx5_qp_attr);
}

EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp) {
  const struct fake_mlx5_ops *ops = qp != NULL ? ops_of(qp->qp_base.context->device) : NULL;
  return ops != NULL ? ops->qp_ex_from_ibv_qp_ex(qp) : NULL;
}

EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr) {
  const struct fake_mlx5_ops *ops =
      attr != NULL && attr->pd != NULL ? ops_of(attr->pd->context->device) : NULL;
  if (ops == NULL) {
    errno = EINVAL;
    return NULL;
  }
  return ops->create_mkey(attr);
}

EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey) {
  if (mkey == NULL) return EINVAL;
  return ((struct fake_mkey_head *)(void *)mkey)->mlx5->destroy_mkey(mkey);
}
