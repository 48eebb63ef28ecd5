/* The UMR side of the fake libibverbs: completion queues, RC queue pairs made by
 * mlx5dv_create_qp with MLX5DV_QP_EX_WITH_MR_LIST (their state machine, the wr_* post API and
 * wr_mr_list), indirect mkeys, the port and GID a self-connected QP needs, and the mlx5
 * direct-verbs table the fake libmlx5 dispatches to (fake_mlx5_provider.h).
 *
 * It checks what mlx5 checks: a DEVX context for mkeys, RTS before a post, IBV_SEND_INLINE on a
 * UMR, no more entries than the mkey holds, and each KLM entry inside a live MR of the mkey's
 * PD (by lkey and MR address); a UMR that breaks a rule completes in error and moves the QP to
 * the error state, as hardware does. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fake_ibverbs_internal.h"

#define FAKE_CQ_DEPTH 64

struct fake_cq {
  struct ibv_cq cq;
  struct ibv_wc entries[FAKE_CQ_DEPTH];
  int head, count;
  int users; /* QPs that complete here */
};

struct fake_mkey {
  struct fake_mkey_head head; /* what callers see first */
  struct ibv_pd *pd;
  uint16_t max_entries;
};

struct fake_umr_qp {
  struct ibv_qp_ex qpx; /* qp_base first: the ibv_qp callers see */
  struct mlx5dv_qp_ex dv;
  uint32_t max_inline_data;
  int building;         /* between wr_start and wr_complete/wr_abort */
  int pending_error;    /* the UMR being built breaks a rule: complete it in error */
  struct fake_ibverbs_umr pending;
  struct fake_mkey *pending_mkey;
};

static struct fake_cq *cqs[MAX_OBJECTS];
static struct fake_umr_qp *umr_qps[MAX_OBJECTS];
static struct fake_mkey *mkeys[MAX_OBJECTS];
static struct fake_ibverbs_umr last_umr;
static uint32_t next_qp_num = 0x100;

void umr_reset_locked(void) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    free(cqs[i]);
    free(umr_qps[i]);
    free(mkeys[i]);
    cqs[i] = NULL;
    umr_qps[i] = NULL;
    mkeys[i] = NULL;
  }
  memset(&last_umr, 0, sizeof last_umr);
  next_qp_num = 0x100;
}

int umr_live(const char *kind) {
  if (strcmp(kind, "cqs") == 0) return count_objects((void *const *)cqs);
  if (strcmp(kind, "umr_qps") == 0) return count_objects((void *const *)umr_qps);
  if (strcmp(kind, "mkeys") == 0) return count_objects((void *const *)mkeys);
  return -1;
}

int umr_objects_on_pd(const struct ibv_pd *pd) {
  int count = 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    count += umr_qps[i] != NULL && umr_qps[i]->qpx.qp_base.pd == pd;
    count += mkeys[i] != NULL && mkeys[i]->pd == pd;
  }
  return count;
}

int umr_destroy_context_locked(const struct ibv_context *context) {
  int destroyed = 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mkeys[i] != NULL && mkeys[i]->pd->context == context) {
      free(mkeys[i]);
      mkeys[i] = NULL;
      ++destroyed;
    }
    if (umr_qps[i] != NULL && umr_qps[i]->qpx.qp_base.context == context) {
      free(umr_qps[i]);
      umr_qps[i] = NULL;
      ++destroyed;
    }
    if (cqs[i] != NULL && cqs[i]->cq.context == context) {
      free(cqs[i]);
      cqs[i] = NULL;
      ++destroyed;
    }
  }
  return destroyed;
}

int umr_mkeys_of(struct ibv_context *context) {
  int count = 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mkeys[i] != NULL && mkeys[i]->pd->context == context) ++count;
  }
  return count;
}

EXPORT void fake_ibverbs_last_umr(struct fake_ibverbs_umr *out) {
  pthread_mutex_lock(&fake_lock);
  *out = last_umr;
  pthread_mutex_unlock(&fake_lock);
}

static struct fake_umr_qp *umr_qp_of(struct ibv_qp_ex *qpx) {
  return has_object((void *const *)umr_qps, qpx) ? (struct fake_umr_qp *)(void *)qpx : NULL;
}

static void push_completion(struct fake_cq *cq, uint64_t wr_id, int status, uint32_t qp_num) {
  if (cq->count == FAKE_CQ_DEPTH) return; /* overrun: the completion is lost, as on hardware */
  struct ibv_wc *wc = &cq->entries[(cq->head + cq->count) % FAKE_CQ_DEPTH];
  memset(wc, 0, sizeof *wc);
  wc->wr_id = wr_id;
  wc->status = (uint32_t)status; /* hmr's ABI keeps it as an integer; rdma-core's is an enum */
  wc->qp_num = qp_num;
  cq->count++;
}

/* ------------------------------------------------------------ completion queues ---------- */

static int fake_poll_cq(struct ibv_cq *cq_pointer, int num_entries, struct ibv_wc *wc) {
  pthread_mutex_lock(&fake_lock);
  int found = 0;
  if (fake_calls_enter(&fake_verbs_calls, "poll_cq") != 0 ||
      !has_object((void *const *)cqs, cq_pointer)) {
    found = -1;
  } else {
    struct fake_cq *cq = (struct fake_cq *)(void *)cq_pointer;
    while (found < num_entries && cq->count > 0) {
      wc[found++] = cq->entries[cq->head];
      cq->head = (cq->head + 1) % FAKE_CQ_DEPTH;
      cq->count--;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return found;
}

void umr_install_context_ops(struct fake_context *context) {
  context->vctx.context.ops.poll_cq = fake_poll_cq;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
  (void)comp_vector;
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_create_cq");
  if (err == 0 && (!has_object((void *const *)contexts, fake_context_of(context)) || cqe <= 0 ||
                   channel != NULL)) {
    err = EINVAL;
  }
  struct fake_cq *cq = NULL;
  if (err == 0) {
    cq = calloc(1, sizeof *cq);
    if (cq == NULL || !add_object((void **)cqs, cq)) {
      free(cq);
      cq = NULL;
      err = ENOMEM;
    }
  }
  if (cq != NULL) {
    cq->cq.context = context;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe < FAKE_CQ_DEPTH ? cqe : FAKE_CQ_DEPTH;
  }
  pthread_mutex_unlock(&fake_lock);
  if (cq == NULL) errno = err;
  return cq != NULL ? &cq->cq : NULL;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq_pointer) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_destroy_cq");
  struct fake_cq *cq = (struct fake_cq *)(void *)cq_pointer;
  if (err == 0 && !has_object((void *const *)cqs, cq)) err = EINVAL;
  if (err == 0 && cq->users > 0) err = EBUSY;
  if (err == 0) remove_object((void **)cqs, cq);
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(cq);
  return err;
}

/* ------------------------------------------------------------ port and GID --------------- */

/* rdma-core declares the exported entry with its compat struct, a prefix of struct
 * ibv_port_attr (its inline passes the full struct), so the fake fills the full one. */
#ifdef FAKE_COMPAT_PORT_ATTR
EXPORT int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                           struct _compat_ibv_port_attr *compat) {
  struct ibv_port_attr *attr = (struct ibv_port_attr *)(void *)compat;
#else
EXPORT int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                           struct ibv_port_attr *attr) {
#endif
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_query_port");
  if (err == 0 && (!has_object((void *const *)contexts, fake_context_of(context)) || port_num != 1))
    err = EINVAL;
  if (err == 0) {
    const struct fake_context *owner = fake_context_of(context);
    memset(attr, 0, sizeof *attr);
    attr->state = IBV_PORT_ACTIVE;
    attr->max_mtu = IBV_MTU_4096;
    attr->active_mtu = IBV_MTU_1024;
    attr->gid_tbl_len = 1;
    attr->lid = (uint16_t)(owner->device + 1);
    attr->link_layer = (uint8_t)configs[owner->device].link_layer;
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

static void gid_of(int device, union ibv_gid *gid) {
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  gid->raw[15] = (uint8_t)(device + 1);
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                         union ibv_gid *gid) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_query_gid");
  if (err == 0 && (!has_object((void *const *)contexts, fake_context_of(context)) ||
                   port_num != 1 || index != 0)) {
    err = EINVAL;
  }
  if (err == 0) gid_of(fake_context_of(context)->device, gid);
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) return 0;
  errno = err; /* -1 and errno, as rdma-core's verbs.c answers (not an errno return) */
  return -1;
}

/* ------------------------------------------------------------ the UMR queue pair --------- */

static void fake_wr_start(struct ibv_qp_ex *qpx) {
  pthread_mutex_lock(&fake_lock);
  struct fake_umr_qp *qp = umr_qp_of(qpx);
  if (qp != NULL) {
    qp->building = 1;
    qp->pending_error = 0;
    qp->pending_mkey = NULL;
    memset(&qp->pending, 0, sizeof qp->pending);
  }
  pthread_mutex_unlock(&fake_lock);
}

/* Whether [addr, addr+length) lies inside the live MR with `lkey` in `pd`. */
static int klm_entry_valid(const struct ibv_sge *sge, struct ibv_pd *pd) {
  const struct fake_mr *mr = mr_with_lkey(sge->lkey);
  if (mr == NULL || mr->mr.pd != pd || sge->length == 0) return 0;
  return sge->addr >= mr->iova && sge->addr - mr->iova <= mr->mr.length &&
         sge->length <= mr->mr.length - (sge->addr - mr->iova);
}

static void fake_wr_mr_list(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey_pointer,
                            uint32_t access_flags, uint16_t num_sges, struct ibv_sge *sge) {
  pthread_mutex_lock(&fake_lock);
  struct fake_umr_qp *qp =
      (struct fake_umr_qp *)(void *)((char *)mqp - offsetof(struct fake_umr_qp, dv));
  if (has_object((void *const *)umr_qps, qp) && qp->building) {
    struct fake_mkey *mkey = (struct fake_mkey *)(void *)mkey_pointer;
    struct fake_ibverbs_umr *umr = &qp->pending;
    umr->wr_id = qp->qpx.wr_id;
    umr->wr_flags = qp->qpx.wr_flags;
    umr->access = access_flags;
    umr->num_sge = num_sges;
    if (!has_object((void *const *)mkeys, mkey) || mkey->head.mkey.lkey == 0) {
      qp->pending_error = 1;
    } else {
      qp->pending_mkey = mkey;
      umr->mkey_lkey = mkey->head.mkey.lkey;
      umr->mkey_rkey = mkey->head.mkey.rkey;
      if (num_sges == 0 || num_sges > mkey->max_entries || num_sges > FAKE_IBVERBS_MAX_SGE ||
          (access_flags & ~(unsigned int)KNOWN_ACCESS) != 0 ||
          (qp->qpx.wr_flags & IBV_SEND_INLINE) == 0 ||
          (uint32_t)num_sges * 16u > qp->max_inline_data + 64u) {
        qp->pending_error = 1;
      }
    }
    /* libmlx5 before rdma-core 61 (providers/mlx5/qp.c, umr_sg_list_create) sums the entries'
     * lengths in an int and hands that to the mkey as its length: a total of 2 GiB or more
     * wraps (4 GiB gives 0, 3 GiB a sign-extended negative).  The fake computes it the same
     * way, in defined arithmetic. */
    uint32_t byte_count = 0;
    for (uint16_t i = 0; i < num_sges; ++i) byte_count += sge[i].length;
    umr->key_length = (uint64_t)(int64_t)(int32_t)byte_count;
    for (uint16_t i = 0; i < num_sges && i < FAKE_IBVERBS_MAX_SGE; ++i) {
      umr->addr[i] = sge[i].addr;
      umr->length[i] = sge[i].length;
      umr->lkey[i] = sge[i].lkey;
      if (qp->pending_mkey != NULL && !klm_entry_valid(&sge[i], qp->pending_mkey->pd)) {
        qp->pending_error = 1;
      }
    }
  }
  pthread_mutex_unlock(&fake_lock);
}

static int fake_wr_complete(struct ibv_qp_ex *qpx) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "wr_complete");
  struct fake_umr_qp *qp = umr_qp_of(qpx);
  if (err == 0 && (qp == NULL || !qp->building)) err = EINVAL;
  if (err == 0 && qp->qpx.qp_base.state != IBV_QPS_RTS) err = EINVAL;
  if (err == 0) {
    int status = fake_calls_failure(&fake_verbs_calls, "umr:completion");
    if (status == 0 && qp->pending_error) status = IBV_WC_GENERAL_ERR;
    qp->pending.status = status;
    last_umr = qp->pending;
    if (status != 0) qp->qpx.qp_base.state = IBV_QPS_ERR;
    if (status != 0 || (qp->qpx.wr_flags & IBV_SEND_SIGNALED) != 0) {
      push_completion((struct fake_cq *)(void *)qp->qpx.qp_base.send_cq, qp->pending.wr_id,
                      status, qp->qpx.qp_base.qp_num);
    }
  }
  if (qp != NULL) qp->building = 0;
  pthread_mutex_unlock(&fake_lock);
  return err;
}

static void fake_wr_abort(struct ibv_qp_ex *qpx) {
  pthread_mutex_lock(&fake_lock);
  struct fake_umr_qp *qp = umr_qp_of(qpx);
  if (qp != NULL) qp->building = 0;
  pthread_mutex_unlock(&fake_lock);
}

static struct ibv_qp *mlx5_create_qp(struct ibv_context *context,
                                     struct ibv_qp_init_attr_ex *attr,
                                     struct mlx5dv_qp_init_attr *dv_attr) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "mlx5dv_create_qp");
  struct fake_cq *send_cq = (struct fake_cq *)(void *)attr->send_cq;
  struct fake_cq *recv_cq = (struct fake_cq *)(void *)attr->recv_cq;
  if (err == 0 && (!has_object((void *const *)contexts, fake_context_of(context)) ||
                   !configs[fake_context_of(context)->device].mlx5)) {
    err = EOPNOTSUPP;
  }
  if (err == 0 && (attr->qp_type != IBV_QPT_RC || (attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 ||
                   (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) == 0 ||
                   !has_object((void *const *)pds, attr->pd) || attr->pd->context != context ||
                   !has_object((void *const *)cqs, send_cq) ||
                   !has_object((void *const *)cqs, recv_cq) || attr->cap.max_send_wr == 0)) {
    err = EINVAL;
  }
  if (err == 0 && (dv_attr == NULL ||
                   (dv_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) == 0 ||
                   (dv_attr->send_ops_flags & MLX5DV_QP_EX_WITH_MR_LIST) == 0)) {
    err = EINVAL; /* the fake makes only UMR QPs */
  }
  if (err == 0 && attr->cap.max_inline_data > 1024) err = EINVAL;
  struct fake_umr_qp *qp = NULL;
  if (err == 0) {
    qp = calloc(1, sizeof *qp);
    if (qp == NULL || !add_object((void **)umr_qps, qp)) {
      free(qp);
      qp = NULL;
      err = ENOMEM;
    }
  }
  if (qp != NULL) {
    struct ibv_qp *base = &qp->qpx.qp_base;
    base->context = context;
    base->qp_context = attr->qp_context;
    base->pd = attr->pd;
    base->send_cq = attr->send_cq;
    base->recv_cq = attr->recv_cq;
    base->qp_num = next_qp_num++;
    base->state = IBV_QPS_RESET;
    base->qp_type = IBV_QPT_RC;
    qp->qpx.wr_start = fake_wr_start;
    qp->qpx.wr_complete = fake_wr_complete;
    qp->qpx.wr_abort = fake_wr_abort;
    qp->dv.wr_mr_list = fake_wr_mr_list;
    qp->max_inline_data = attr->cap.max_inline_data;
    send_cq->users++;
    recv_cq->users++;
  }
  pthread_mutex_unlock(&fake_lock);
  if (qp == NULL) errno = err;
  return qp != NULL ? &qp->qpx.qp_base : NULL;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) {
  pthread_mutex_lock(&fake_lock);
  struct fake_umr_qp *found = umr_qp_of((struct ibv_qp_ex *)(void *)qp);
  pthread_mutex_unlock(&fake_lock);
  return found != NULL ? &found->qpx : NULL;
}

static struct mlx5dv_qp_ex *mlx5_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qpx) {
  pthread_mutex_lock(&fake_lock);
  struct fake_umr_qp *qp = umr_qp_of(qpx);
  pthread_mutex_unlock(&fake_lock);
  return qp != NULL ? &qp->dv : NULL;
}

/* The transitions an RC QP takes on its way to RTS, with the attributes each one needs. */
static int check_transition(const struct fake_umr_qp *qp, const struct ibv_qp_attr *attr,
                            int mask) {
  const struct ibv_qp *base = &qp->qpx.qp_base;
  if ((mask & IBV_QP_STATE) == 0) return EINVAL;
  switch (attr->qp_state) {
    case IBV_QPS_RESET: return 0;
    case IBV_QPS_INIT: {
      const int needed = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      if (base->state != IBV_QPS_RESET || (mask & needed) != needed || attr->port_num != 1)
        return EINVAL;
      return 0;
    }
    case IBV_QPS_RTR: {
      const int needed = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      if (base->state != IBV_QPS_INIT || (mask & needed) != needed) return EINVAL;
      const int device = fake_context_of(base->context)->device;
      if (attr->ah_attr.port_num != 1 || attr->ah_attr.dlid != (uint16_t)(device + 1))
        return EINVAL;
      if (configs[device].link_layer == IBV_LINK_LAYER_ETHERNET) {
        union ibv_gid gid;
        gid_of(device, &gid);
        if (!attr->ah_attr.is_global ||
            memcmp(&attr->ah_attr.grh.dgid, &gid, sizeof gid) != 0) {
          return EINVAL; /* RoCE needs a GRH */
        }
      }
      /* The destination must be a QP of this fake: here, the QP itself. */
      for (int i = 0; i < MAX_OBJECTS; ++i) {
        if (umr_qps[i] != NULL && umr_qps[i]->qpx.qp_base.qp_num == attr->dest_qp_num) return 0;
      }
      return EINVAL;
    }
    case IBV_QPS_RTS: {
      const int needed = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC;
      if (base->state != IBV_QPS_RTR || (mask & needed) != needed) return EINVAL;
      return 0;
    }
    default: return EINVAL;
  }
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp_pointer, struct ibv_qp_attr *attr, int mask) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_modify_qp");
  struct fake_umr_qp *qp = umr_qp_of((struct ibv_qp_ex *)(void *)qp_pointer);
  if (err == 0 && qp == NULL) err = EINVAL;
  if (err == 0) err = check_transition(qp, attr, mask);
  if (err == 0) {
    qp->qpx.qp_base.state = attr->qp_state;
    if (attr->qp_state == IBV_QPS_RESET) {
      /* Resetting a QP flushes what its CQ still holds of it. */
      struct fake_cq *cq = (struct fake_cq *)(void *)qp->qpx.qp_base.send_cq;
      cq->head = cq->count = 0;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp_pointer) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_destroy_qp");
  struct fake_umr_qp *qp = umr_qp_of((struct ibv_qp_ex *)(void *)qp_pointer);
  if (err == 0 && qp == NULL) err = EINVAL;
  if (err == 0) {
    ((struct fake_cq *)(void *)qp->qpx.qp_base.send_cq)->users--;
    ((struct fake_cq *)(void *)qp->qpx.qp_base.recv_cq)->users--;
    remove_object((void **)umr_qps, qp);
  }
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(qp);
  return err;
}

/* ------------------------------------------------------------ mlx5 direct verbs ---------- */

static bool mlx5_is_supported(struct ibv_device *device) {
  pthread_mutex_lock(&fake_lock);
  fake_calls_enter(&fake_verbs_calls, "mlx5dv_is_supported");
  const int index = (int)((struct fake_device *)(void *)device - devices);
  const bool supported = index >= 0 && index < FAKE_IBVERBS_MAX_DEVICES && configs[index].mlx5;
  pthread_mutex_unlock(&fake_lock);
  return supported;
}

static struct ibv_context *mlx5_open_device(struct ibv_device *device,
                                            struct mlx5dv_context_attr *attr) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "mlx5dv_open_device");
  const int index = (int)((struct fake_device *)(void *)device - devices);
  if (err == 0 && (index < 0 || index >= FAKE_IBVERBS_MAX_DEVICES)) err = ENODEV;
  if (err == 0 && !configs[index].mlx5) err = EOPNOTSUPP;
  const int devx = attr != NULL && (attr->flags & MLX5DV_CONTEXT_FLAGS_DEVX) != 0;
  if (err == 0 && devx) err = configs[index].devx_errno;
  struct fake_context *context = err == 0 ? make_context_locked(index, devx, &err) : NULL;
  pthread_mutex_unlock(&fake_lock);
  if (context == NULL) errno = err;
  return context != NULL ? &context->vctx.context : NULL;
}

static struct mlx5dv_mkey *mlx5_create_mkey(struct mlx5dv_mkey_init_attr *attr) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "mlx5dv_create_mkey");
  if (err == 0 && (!has_object((void *const *)pds, attr->pd) ||
                   attr->create_flags != MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT ||
                   attr->max_entries == 0)) {
    err = EINVAL;
  }
  /* An indirect mkey is a DEVX object: on a context opened without DEVX the kernel refuses it
   * with EINVAL (drivers/infiniband/hw/mlx5/devx.c, devx_get_uid: no DEVX uid). */
  if (err == 0 && !fake_context_of(attr->pd->context)->devx) err = EINVAL;
  if (err == 0 && mkeys_full(attr->pd->context, 0)) err = ENOMEM; /* the shared mkey table */
  struct fake_mkey *mkey = NULL;
  if (err == 0) {
    mkey = calloc(1, sizeof *mkey);
    if (mkey == NULL || !add_object((void **)mkeys, mkey)) {
      free(mkey);
      mkey = NULL;
      err = ENOMEM;
    }
  }
  if (mkey != NULL) {
    const uint32_t index = next_key++;
    mkey->head.mkey.lkey = index << 8 | 0x5a;
    mkey->head.mkey.rkey = index << 8 | 0x5a;
    mkey->head.mlx5 = &fake_mlx5_ops;
    mkey->pd = attr->pd;
    attr->max_entries = (uint16_t)((attr->max_entries + 3u) & ~3u); /* mlx5 rounds up to 4 */
    mkey->max_entries = attr->max_entries;
  }
  pthread_mutex_unlock(&fake_lock);
  if (mkey == NULL) errno = err;
  return mkey != NULL ? &mkey->head.mkey : NULL;
}

static int mlx5_destroy_mkey(struct mlx5dv_mkey *mkey) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "mlx5dv_destroy_mkey");
  if (err == 0 && !remove_object((void **)mkeys, mkey)) err = EINVAL;
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(mkey);
  return err;
}

const struct fake_mlx5_ops fake_mlx5_ops = {
    .is_supported = mlx5_is_supported,
    .open_device = mlx5_open_device,
    .create_qp = mlx5_create_qp,
    .qp_ex_from_ibv_qp_ex = mlx5_qp_ex_from_ibv_qp_ex,
    .create_mkey = mlx5_create_mkey,
    .destroy_mkey = mlx5_destroy_mkey,
};
