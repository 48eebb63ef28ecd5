// hmr's own declarations of the libibverbs ABI (nic/verbs/verbs_abi.h) against rdma-core's
// <infiniband/verbs.h>, where libibverbs-dev is installed.  A wrong offset here would make hmr
// read a provider's ops table or a device's limits from the wrong place, so every field hmr
// touches, and the size of every struct hmr allocates or passes by size, is compared.
#include "nic/verbs/verbs_abi.h"

#include <gtest/gtest.h>

#include "nic/verbs/mlx5dv_abi.h"
#include "nic/verbs/verbs_qp_abi.h"

namespace {
// rdma-core's header turns these names into macros (IB_UVERBS_*), so ours are read before it.
constexpr long long kOurPrefetchNoFault = hmr::verbs::IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
constexpr long long kOurAdviseFlush = hmr::verbs::IBV_ADVISE_MR_FLAG_FLUSH;
constexpr long long kOurOptionalRange = hmr::verbs::HMR_IBV_ACCESS_OPTIONAL_RANGE;
}  // namespace

#if __has_include(<infiniband/verbs.h>) && __has_include(<infiniband/mlx5dv.h>)
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#define HMR_HAVE_RDMA_CORE_HEADER 1
#endif

namespace {

#ifdef HMR_HAVE_RDMA_CORE_HEADER
namespace ours = hmr::verbs;

#define HMR_SAME_LAYOUT(type, field)                                              \
  static_assert(offsetof(ours::type, field) == offsetof(::type, field),          \
                #type "." #field " is not where rdma-core has it");              \
  static_assert(sizeof(ours::type::field) == sizeof(::type::field),              \
                #type "." #field " has not rdma-core's size")
#define HMR_SAME_VALUE(name)                                                       \
  static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), \
                #name " has not rdma-core's value")
#define HMR_SAME_SIZE(type) \
  static_assert(sizeof(ours::type) == sizeof(::type), #type " has not rdma-core's size")

HMR_SAME_SIZE(ibv_device);
HMR_SAME_LAYOUT(ibv_device, name);
HMR_SAME_LAYOUT(ibv_device, ibdev_path);

HMR_SAME_SIZE(ibv_context_ops);
HMR_SAME_LAYOUT(ibv_context_ops, alloc_mw);
HMR_SAME_LAYOUT(ibv_context_ops, bind_mw);
HMR_SAME_LAYOUT(ibv_context_ops, dealloc_mw);
HMR_SAME_LAYOUT(ibv_context_ops, post_send);

HMR_SAME_SIZE(ibv_context);
HMR_SAME_LAYOUT(ibv_context, device);
HMR_SAME_LAYOUT(ibv_context, ops);
HMR_SAME_LAYOUT(ibv_context, abi_compat);

HMR_SAME_SIZE(verbs_context);
HMR_SAME_LAYOUT(verbs_context, advise_mr);
HMR_SAME_LAYOUT(verbs_context, query_device_ex);
HMR_SAME_LAYOUT(verbs_context, sz);
HMR_SAME_LAYOUT(verbs_context, context);

HMR_SAME_SIZE(ibv_device_attr);
HMR_SAME_LAYOUT(ibv_device_attr, max_mr_size);
HMR_SAME_LAYOUT(ibv_device_attr, vendor_id);
HMR_SAME_LAYOUT(ibv_device, node_type);
HMR_SAME_LAYOUT(ibv_device, transport_type);
HMR_SAME_LAYOUT(ibv_device_attr, device_cap_flags);
HMR_SAME_LAYOUT(ibv_device_attr, atomic_cap);
HMR_SAME_LAYOUT(ibv_device_attr, max_mw);
HMR_SAME_LAYOUT(ibv_device_attr, phys_port_cnt);

HMR_SAME_SIZE(ibv_device_attr_ex);
HMR_SAME_LAYOUT(ibv_device_attr_ex, odp_caps);
HMR_SAME_LAYOUT(ibv_device_attr_ex, device_cap_flags_ex);
HMR_SAME_LAYOUT(ibv_device_attr_ex, rss_caps);
HMR_SAME_LAYOUT(ibv_device_attr_ex, max_dm_size);
HMR_SAME_LAYOUT(ibv_device_attr_ex, phys_port_cnt_ex);

HMR_SAME_SIZE(ibv_pd);
HMR_SAME_SIZE(ibv_mr);
HMR_SAME_LAYOUT(ibv_mr, pd);
HMR_SAME_LAYOUT(ibv_mr, addr);
HMR_SAME_LAYOUT(ibv_mr, length);
HMR_SAME_LAYOUT(ibv_mr, lkey);
HMR_SAME_LAYOUT(ibv_mr, rkey);
HMR_SAME_SIZE(ibv_mw);
HMR_SAME_LAYOUT(ibv_mw, rkey);
HMR_SAME_LAYOUT(ibv_mw, type);
HMR_SAME_SIZE(ibv_mw_bind_info);
HMR_SAME_SIZE(ibv_mw_bind);
HMR_SAME_LAYOUT(ibv_mw_bind, bind_info);
HMR_SAME_SIZE(ibv_sge);
HMR_SAME_SIZE(ibv_send_wr);
HMR_SAME_LAYOUT(ibv_send_wr, opcode);
HMR_SAME_LAYOUT(ibv_send_wr, send_flags);
HMR_SAME_LAYOUT(ibv_send_wr, invalidate_rkey);
HMR_SAME_LAYOUT(ibv_send_wr, wr);
HMR_SAME_LAYOUT(ibv_send_wr, bind_mw);
static_assert(offsetof(::ibv_qp, context) == offsetof(ours::hmr_ibv_qp_head, context));

HMR_SAME_VALUE(IBV_ACCESS_RELAXED_ORDERING);
static_assert(kOurOptionalRange == ::IBV_ACCESS_OPTIONAL_RANGE);
HMR_SAME_VALUE(IBV_ACCESS_ON_DEMAND);
HMR_SAME_VALUE(IBV_ACCESS_MW_BIND);
HMR_SAME_VALUE(IBV_REREG_MR_CHANGE_ACCESS);
HMR_SAME_VALUE(IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW);
HMR_SAME_VALUE(IBV_DEVICE_MEM_WINDOW_TYPE_2B);
HMR_SAME_VALUE(IBV_ODP_SUPPORT_SRQ_RECV);
static_assert(kOurPrefetchNoFault == ::IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT);
static_assert(kOurAdviseFlush == ::IBV_ADVISE_MR_FLAG_FLUSH);
HMR_SAME_VALUE(IBV_WR_BIND_MW);
HMR_SAME_VALUE(IBV_WR_LOCAL_INV);
HMR_SAME_VALUE(IBV_SEND_SIGNALED);
HMR_SAME_VALUE(IBV_SEND_INLINE);

// The UMR queue (verbs_qp_abi.h).
HMR_SAME_LAYOUT(ibv_context_ops, poll_cq);
HMR_SAME_SIZE(ibv_gid);
HMR_SAME_SIZE(ibv_global_route);
HMR_SAME_LAYOUT(ibv_global_route, dgid);
HMR_SAME_LAYOUT(ibv_global_route, sgid_index);
HMR_SAME_LAYOUT(ibv_global_route, hop_limit);
HMR_SAME_SIZE(ibv_ah_attr);
HMR_SAME_LAYOUT(ibv_ah_attr, grh);
HMR_SAME_LAYOUT(ibv_ah_attr, dlid);
HMR_SAME_LAYOUT(ibv_ah_attr, is_global);
HMR_SAME_LAYOUT(ibv_ah_attr, port_num);
HMR_SAME_SIZE(ibv_qp_cap);
HMR_SAME_LAYOUT(ibv_qp_cap, max_inline_data);
HMR_SAME_SIZE(ibv_qp_attr);
HMR_SAME_LAYOUT(ibv_qp_attr, qp_state);
HMR_SAME_LAYOUT(ibv_qp_attr, path_mtu);
HMR_SAME_LAYOUT(ibv_qp_attr, dest_qp_num);
HMR_SAME_LAYOUT(ibv_qp_attr, ah_attr);
HMR_SAME_LAYOUT(ibv_qp_attr, pkey_index);
HMR_SAME_LAYOUT(ibv_qp_attr, max_rd_atomic);
HMR_SAME_LAYOUT(ibv_qp_attr, max_dest_rd_atomic);
HMR_SAME_LAYOUT(ibv_qp_attr, min_rnr_timer);
HMR_SAME_LAYOUT(ibv_qp_attr, port_num);
HMR_SAME_LAYOUT(ibv_qp_attr, timeout);
HMR_SAME_LAYOUT(ibv_qp_attr, retry_cnt);
HMR_SAME_LAYOUT(ibv_qp_attr, rnr_retry);
HMR_SAME_SIZE(ibv_rx_hash_conf);
HMR_SAME_SIZE(ibv_qp_init_attr_ex);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, send_cq);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, recv_cq);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, cap);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, qp_type);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, comp_mask);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, pd);
HMR_SAME_LAYOUT(ibv_qp_init_attr_ex, send_ops_flags);
HMR_SAME_SIZE(ibv_port_attr);
HMR_SAME_LAYOUT(ibv_port_attr, active_mtu);
HMR_SAME_LAYOUT(ibv_port_attr, lid);
HMR_SAME_LAYOUT(ibv_port_attr, link_layer);
HMR_SAME_SIZE(ibv_wc);
HMR_SAME_LAYOUT(ibv_wc, wr_id);
HMR_SAME_LAYOUT(ibv_wc, status);
HMR_SAME_LAYOUT(ibv_wc, vendor_err);
HMR_SAME_SIZE(ibv_cq);
HMR_SAME_LAYOUT(ibv_cq, context);
HMR_SAME_SIZE(ibv_qp);
HMR_SAME_LAYOUT(ibv_qp, context);
HMR_SAME_LAYOUT(ibv_qp, qp_num);
HMR_SAME_LAYOUT(ibv_qp, state);
HMR_SAME_SIZE(ibv_qp_ex);
HMR_SAME_LAYOUT(ibv_qp_ex, qp_base);
HMR_SAME_LAYOUT(ibv_qp_ex, wr_id);
HMR_SAME_LAYOUT(ibv_qp_ex, wr_flags);
HMR_SAME_LAYOUT(ibv_qp_ex, wr_start);
HMR_SAME_LAYOUT(ibv_qp_ex, wr_complete);
HMR_SAME_LAYOUT(ibv_qp_ex, wr_abort);
HMR_SAME_VALUE(IBV_QPT_RC);
HMR_SAME_VALUE(IBV_QPS_RESET);
HMR_SAME_VALUE(IBV_QPS_INIT);
HMR_SAME_VALUE(IBV_QPS_RTR);
HMR_SAME_VALUE(IBV_QPS_RTS);
HMR_SAME_VALUE(IBV_QPS_ERR);
HMR_SAME_VALUE(IBV_QPS_UNKNOWN);
HMR_SAME_VALUE(IBV_PORT_ACTIVE_DEFER);
HMR_SAME_VALUE(IBV_MTU_1024);
HMR_SAME_VALUE(IBV_PORT_ACTIVE);
HMR_SAME_VALUE(IBV_LINK_LAYER_ETHERNET);
HMR_SAME_VALUE(IBV_FORK_DISABLED);
HMR_SAME_VALUE(IBV_FORK_ENABLED);
HMR_SAME_VALUE(IBV_FORK_UNNEEDED);
HMR_SAME_VALUE(IBV_NODE_CA);
HMR_SAME_VALUE(IBV_NODE_RNIC);
HMR_SAME_VALUE(IBV_NODE_UNSPECIFIED);
HMR_SAME_VALUE(IBV_TRANSPORT_IB);
HMR_SAME_VALUE(IBV_TRANSPORT_IWARP);
HMR_SAME_VALUE(IBV_TRANSPORT_UNSPECIFIED);
HMR_SAME_VALUE(IBV_WC_SUCCESS);
HMR_SAME_VALUE(IBV_QP_STATE);
HMR_SAME_VALUE(IBV_QP_ACCESS_FLAGS);
HMR_SAME_VALUE(IBV_QP_PKEY_INDEX);
HMR_SAME_VALUE(IBV_QP_PORT);
HMR_SAME_VALUE(IBV_QP_AV);
HMR_SAME_VALUE(IBV_QP_PATH_MTU);
HMR_SAME_VALUE(IBV_QP_TIMEOUT);
HMR_SAME_VALUE(IBV_QP_RETRY_CNT);
HMR_SAME_VALUE(IBV_QP_RNR_RETRY);
HMR_SAME_VALUE(IBV_QP_RQ_PSN);
HMR_SAME_VALUE(IBV_QP_MAX_QP_RD_ATOMIC);
HMR_SAME_VALUE(IBV_QP_MIN_RNR_TIMER);
HMR_SAME_VALUE(IBV_QP_SQ_PSN);
HMR_SAME_VALUE(IBV_QP_MAX_DEST_RD_ATOMIC);
HMR_SAME_VALUE(IBV_QP_DEST_QPN);
HMR_SAME_VALUE(IBV_QP_INIT_ATTR_PD);
HMR_SAME_VALUE(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);

// Indirect mkeys (mlx5dv_abi.h).
HMR_SAME_SIZE(mlx5dv_context_attr);
HMR_SAME_LAYOUT(mlx5dv_context_attr, flags);
HMR_SAME_LAYOUT(mlx5dv_context_attr, comp_mask);
HMR_SAME_SIZE(mlx5dv_mkey_init_attr);
HMR_SAME_LAYOUT(mlx5dv_mkey_init_attr, pd);
HMR_SAME_LAYOUT(mlx5dv_mkey_init_attr, create_flags);
HMR_SAME_LAYOUT(mlx5dv_mkey_init_attr, max_entries);
HMR_SAME_SIZE(mlx5dv_mkey);
HMR_SAME_LAYOUT(mlx5dv_mkey, lkey);
HMR_SAME_LAYOUT(mlx5dv_mkey, rkey);
HMR_SAME_SIZE(mlx5dv_qp_init_attr);
HMR_SAME_LAYOUT(mlx5dv_qp_init_attr, comp_mask);
HMR_SAME_LAYOUT(mlx5dv_qp_init_attr, send_ops_flags);
HMR_SAME_SIZE(mlx5dv_qp_ex);
HMR_SAME_LAYOUT(mlx5dv_qp_ex, wr_mr_list);
HMR_SAME_VALUE(MLX5DV_CONTEXT_FLAGS_DEVX);
HMR_SAME_VALUE(MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT);
HMR_SAME_VALUE(MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS);
HMR_SAME_VALUE(MLX5DV_QP_EX_WITH_MR_LIST);
#endif

TEST(VerbsAbi, MatchesRdmaCoreHeader) {
#ifdef HMR_HAVE_RDMA_CORE_HEADER
  // The comparison is the static_asserts above; reaching here means they held.
  EXPECT_EQ(sizeof(hmr::verbs::verbs_context), sizeof(::verbs_context));
#else
  GTEST_SKIP() << "libibverbs-dev (<infiniband/verbs.h>) is not installed; install it to check "
                  "nic/verbs/verbs_abi.h against rdma-core";
#endif
}

}  // namespace
