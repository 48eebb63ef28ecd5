/* The queue-pair part of rdma-core's libibverbs ABI that hmr uses for its one queue pair of its
 * own: the UMR queue that fills indirect keys (nic/verbs/umr_queue.h).  Completion queues, the
 * QP's state machine (ibv_modify_qp and its attributes), the port and GID a self-connected RC
 * QP needs, work completions, and struct ibv_qp_ex, whose wr_* members are the new post API.
 * Layouts and values follow <infiniband/verbs.h> of rdma-core 44; tests/nic/verbs_abi_test.cpp
 * compares them with the real header where it is installed.  Plain C as well as C++, like
 * verbs_abi.h. */
#ifndef HMR_NIC_VERBS_VERBS_QP_ABI_H
#define HMR_NIC_VERBS_VERBS_QP_ABI_H

#include "nic/verbs/verbs_abi.h"

#ifdef __cplusplus
namespace hmr::verbs {
#endif

enum ibv_qp_type { IBV_QPT_RC = 2 };
enum ibv_qp_state {
  IBV_QPS_RESET,
  IBV_QPS_INIT,
  IBV_QPS_RTR,
  IBV_QPS_RTS,
  IBV_QPS_SQD,
  IBV_QPS_SQE,
  IBV_QPS_ERR,
  IBV_QPS_UNKNOWN,
};
enum ibv_mtu { IBV_MTU_256 = 1, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096 };
enum ibv_mig_state { IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED };
enum ibv_port_state {
  IBV_PORT_NOP,
  IBV_PORT_DOWN,
  IBV_PORT_INIT,
  IBV_PORT_ARMED,
  IBV_PORT_ACTIVE,
  IBV_PORT_ACTIVE_DEFER,
};
enum { IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET };
/* Work completions carry many more statuses and opcodes than hmr names; struct ibv_wc keeps
 * them as plain integers so that reading one is never an out-of-range enum value. */
enum { IBV_WC_SUCCESS = 0 };

enum ibv_qp_attr_mask {
  IBV_QP_STATE = 1 << 0,
  IBV_QP_ACCESS_FLAGS = 1 << 3,
  IBV_QP_PKEY_INDEX = 1 << 4,
  IBV_QP_PORT = 1 << 5,
  IBV_QP_AV = 1 << 7,
  IBV_QP_PATH_MTU = 1 << 8,
  IBV_QP_TIMEOUT = 1 << 9,
  IBV_QP_RETRY_CNT = 1 << 10,
  IBV_QP_RNR_RETRY = 1 << 11,
  IBV_QP_RQ_PSN = 1 << 12,
  IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
  IBV_QP_MIN_RNR_TIMER = 1 << 15,
  IBV_QP_SQ_PSN = 1 << 16,
  IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
  IBV_QP_DEST_QPN = 1 << 20,
};
enum ibv_qp_init_attr_mask {
  IBV_QP_INIT_ATTR_PD = 1 << 0,
  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
};

struct ibv_srq;
struct ibv_xrcd;
struct ibv_rwq_ind_table;
struct ibv_comp_channel;

union ibv_gid {
  uint8_t raw[16];
  struct {
    uint64_t subnet_prefix; /* big endian */
    uint64_t interface_id;
  } global;
};

struct ibv_global_route {
  union ibv_gid dgid;
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
};

struct ibv_ah_attr {
  struct ibv_global_route grh;
  uint16_t dlid;
  uint8_t sl;
  uint8_t src_path_bits;
  uint8_t static_rate;
  uint8_t is_global;
  uint8_t port_num;
};

struct ibv_qp_cap {
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
};

struct ibv_qp_attr {
  enum ibv_qp_state qp_state;
  enum ibv_qp_state cur_qp_state;
  enum ibv_mtu path_mtu;
  enum ibv_mig_state path_mig_state;
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  unsigned int qp_access_flags;
  struct ibv_qp_cap cap;
  struct ibv_ah_attr ah_attr;
  struct ibv_ah_attr alt_ah_attr;
  uint16_t pkey_index;
  uint16_t alt_pkey_index;
  uint8_t en_sqd_async_notify;
  uint8_t sq_draining;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t alt_port_num;
  uint8_t alt_timeout;
  uint32_t rate_limit;
};

struct ibv_rx_hash_conf {
  uint8_t rx_hash_function;
  uint8_t rx_hash_key_len;
  uint8_t* rx_hash_key;
  uint64_t rx_hash_fields_mask;
};

struct ibv_qp_init_attr_ex {
  void* qp_context;
  struct ibv_cq* send_cq;
  struct ibv_cq* recv_cq;
  struct ibv_srq* srq;
  struct ibv_qp_cap cap;
  enum ibv_qp_type qp_type;
  int sq_sig_all;
  uint32_t comp_mask;
  struct ibv_pd* pd;
  struct ibv_xrcd* xrcd;
  uint32_t create_flags;
  uint16_t max_tso_header;
  struct ibv_rwq_ind_table* rwq_ind_tbl;
  struct ibv_rx_hash_conf rx_hash_conf;
  uint32_t source_qpn;
  uint64_t send_ops_flags;
};

/* Filled by the exported ibv_query_port, which writes at most this much. */
struct ibv_port_attr {
  enum ibv_port_state state;
  enum ibv_mtu max_mtu;
  enum ibv_mtu active_mtu;
  int gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint32_t bad_pkey_cntr;
  uint32_t qkey_viol_cntr;
  uint16_t pkey_tbl_len;
  uint16_t lid;
  uint16_t sm_lid;
  uint8_t lmc;
  uint8_t max_vl_num;
  uint8_t sm_sl;
  uint8_t subnet_timeout;
  uint8_t init_type_reply;
  uint8_t active_width;
  uint8_t active_speed;
  uint8_t phys_state;
  uint8_t link_layer;
  uint8_t flags;
  uint16_t port_cap_flags2;
};

struct ibv_wc {
  uint64_t wr_id;
  uint32_t status; /* enum ibv_wc_status */
  uint32_t opcode; /* enum ibv_wc_opcode */
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data_or_invalidated_rkey;
  uint32_t qp_num;
  uint32_t src_qp;
  unsigned int wc_flags;
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
};

struct ibv_cq {
  struct ibv_context* context;
  struct ibv_comp_channel* channel;
  void* cq_context;
  uint32_t handle;
  int cqe;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  uint32_t comp_events_completed;
  uint32_t async_events_completed;
};

struct ibv_qp {
  struct ibv_context* context;
  void* qp_context;
  struct ibv_pd* pd;
  struct ibv_cq* send_cq;
  struct ibv_cq* recv_cq;
  struct ibv_srq* srq;
  uint32_t handle;
  uint32_t qp_num;
  enum ibv_qp_state state;
  enum ibv_qp_type qp_type;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  uint32_t events_completed;
};

/* A QP created with send_ops_flags: the wr_* post API.  hmr calls wr_start, wr_complete and
 * wr_abort; the 17 builders before them are kept as placeholders of the same size. */
struct ibv_qp_ex {
  struct ibv_qp qp_base;
  uint64_t comp_mask;
  uint64_t wr_id;
  unsigned int wr_flags;
  hmr_ibv_unused_fn builders[17];
  void (*wr_start)(struct ibv_qp_ex* qp);
  int (*wr_complete)(struct ibv_qp_ex* qp);
  void (*wr_abort)(struct ibv_qp_ex* qp);
  hmr_ibv_unused_fn after_wr_abort[1];
};

#ifdef __cplusplus
}  // namespace hmr::verbs
#endif

#endif
