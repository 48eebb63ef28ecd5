/* The part of rdma-core's libibverbs ABI that hmr uses, declared in hmr's own minimal header so
 * hmr builds without libibverbs-dev.  Layouts, names and values follow <infiniband/verbs.h> of
 * rdma-core 44 (libibverbs.so.1, IBVERBS_1.1 .. 1.14); tests/nic/verbs_abi_test.cpp compares every
 * declaration here with the real header wherever that header is installed.
 *
 * Several verbs (ibv_query_device_ex, ibv_advise_mr, ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw,
 * ibv_post_send) are not exported functions but inlines that call through the provider's ops
 * tables in struct ibv_context / struct verbs_context; those tables are declared up to the
 * entries hmr calls, with the rest kept as placeholders of the same size.
 *
 * Plain C as well as C++: the fake libibverbs (tests/fakes/fake_ibverbs.c) builds on it where
 * the real header is missing.  In C++ everything lives in hmr::verbs. */
#ifndef HMR_NIC_VERBS_VERBS_ABI_H
#define HMR_NIC_VERBS_VERBS_ABI_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
namespace hmr::verbs {
#endif

enum ibv_access_flags {
  IBV_ACCESS_LOCAL_WRITE = 1,
  IBV_ACCESS_REMOTE_WRITE = 1 << 1,
  IBV_ACCESS_REMOTE_READ = 1 << 2,
  IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
  IBV_ACCESS_MW_BIND = 1 << 4,
  IBV_ACCESS_ZERO_BASED = 1 << 5,
  IBV_ACCESS_ON_DEMAND = 1 << 6,
  IBV_ACCESS_HUGETLB = 1 << 7,
  /* Bits 20..29 are "optional": a kernel that lacks one drops it instead of failing, but only
   * on the ibv_reg_mr_iova2 path (IBVERBS_1.8). */
  IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
};
enum { HMR_IBV_ACCESS_OPTIONAL_RANGE = 0x3ff00000 };

enum ibv_rereg_mr_flags {
  IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0,
  IBV_REREG_MR_CHANGE_PD = 1 << 1,
  IBV_REREG_MR_CHANGE_ACCESS = 1 << 2,
};
/* ibv_rereg_mr's negative results: -1 and -2 leave the old MR valid, -3 leaves the new one valid,
 * -4 and -5 leave an MR that must only be deregistered. */
enum ibv_rereg_mr_err_code {
  IBV_REREG_MR_ERR_INPUT = -1,
  IBV_REREG_MR_ERR_DONT_FORK_NEW = -2,
  IBV_REREG_MR_ERR_DO_FORK_OLD = -3,
  IBV_REREG_MR_ERR_CMD = -4,
  IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW = -5,
};

enum ibv_device_cap_flags {
  IBV_DEVICE_MEM_WINDOW = 1 << 17,
  IBV_DEVICE_MEM_WINDOW_TYPE_2A = 1 << 23,
  IBV_DEVICE_MEM_WINDOW_TYPE_2B = 1 << 24,
};

enum ibv_atomic_cap { IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB };

// ibv_is_fork_initialized()'s answer.
enum ibv_fork_status { IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED };

// ibv_device.node_type and .transport_type: iWARP devices (irdma in iWARP mode, cxgb4, siw)
// report IBV_TRANSPORT_IWARP; EFA reports IBV_NODE_UNSPECIFIED/IBV_TRANSPORT_UNSPECIFIED.
enum ibv_node_type {
  IBV_NODE_UNKNOWN = -1,
  IBV_NODE_CA = 1,
  IBV_NODE_SWITCH,
  IBV_NODE_ROUTER,
  IBV_NODE_RNIC,
  IBV_NODE_USNIC,
  IBV_NODE_USNIC_UDP,
  IBV_NODE_UNSPECIFIED,
};
enum ibv_transport_type {
  IBV_TRANSPORT_UNKNOWN = -1,
  IBV_TRANSPORT_IB = 0,
  IBV_TRANSPORT_IWARP,
  IBV_TRANSPORT_USNIC,
  IBV_TRANSPORT_USNIC_UDP,
  IBV_TRANSPORT_UNSPECIFIED,
};

enum ibv_odp_general_caps {
  IBV_ODP_SUPPORT = 1 << 0,
  IBV_ODP_SUPPORT_IMPLICIT = 1 << 1,
};
enum ibv_odp_transport_cap_bits {
  IBV_ODP_SUPPORT_SEND = 1 << 0,
  IBV_ODP_SUPPORT_RECV = 1 << 1,
  IBV_ODP_SUPPORT_WRITE = 1 << 2,
  IBV_ODP_SUPPORT_READ = 1 << 3,
  IBV_ODP_SUPPORT_ATOMIC = 1 << 4,
  IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5,
};

enum ibv_advise_mr_advice {
  IBV_ADVISE_MR_ADVICE_PREFETCH,
  IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
  IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
};
enum { IBV_ADVISE_MR_FLAG_FLUSH = 1 << 0 };

enum ibv_mw_type { IBV_MW_TYPE_1 = 1, IBV_MW_TYPE_2 = 2 };

enum ibv_wr_opcode {
  IBV_WR_RDMA_WRITE,
  IBV_WR_RDMA_WRITE_WITH_IMM,
  IBV_WR_SEND,
  IBV_WR_SEND_WITH_IMM,
  IBV_WR_RDMA_READ,
  IBV_WR_ATOMIC_CMP_AND_SWP,
  IBV_WR_ATOMIC_FETCH_AND_ADD,
  IBV_WR_LOCAL_INV,
  IBV_WR_BIND_MW,
};
enum ibv_send_flags {
  IBV_SEND_FENCE = 1 << 0,
  IBV_SEND_SIGNALED = 1 << 1,
  IBV_SEND_SOLICITED = 1 << 2,
  IBV_SEND_INLINE = 1 << 3,
};

/* struct ibv_context.abi_compat of a context that is the tail of a struct verbs_context. */
#define HMR_VERBS_ABI_IS_EXTENDED ((void*)UINTPTR_MAX)

struct ibv_context;
struct ibv_cq;
struct ibv_wc;
struct ibv_pd;
struct ibv_qp;
struct ibv_mw;
struct ibv_mw_bind;
struct ibv_send_wr;
struct ibv_sge;
struct ibv_query_device_ex_input;
struct ibv_device_attr_ex;

enum { IBV_SYSFS_NAME_MAX = 64, IBV_SYSFS_PATH_MAX = 256 };

struct ibv_device {
  void* private_ops[2];
  int node_type;
  int transport_type;
  char name[IBV_SYSFS_NAME_MAX];
  char dev_name[IBV_SYSFS_NAME_MAX];
  char dev_path[IBV_SYSFS_PATH_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
};

typedef void (*hmr_ibv_unused_fn)(void);

struct ibv_context_ops {
  hmr_ibv_unused_fn compat_before_mw[7];
  struct ibv_mw* (*alloc_mw)(struct ibv_pd* pd, enum ibv_mw_type type);
  int (*bind_mw)(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* mw_bind);
  int (*dealloc_mw)(struct ibv_mw* mw);
  hmr_ibv_unused_fn compat_create_cq;
  int (*poll_cq)(struct ibv_cq* cq, int num_entries, struct ibv_wc* wc);
  hmr_ibv_unused_fn between_poll_cq_and_post_send[13];
  int (*post_send)(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
  hmr_ibv_unused_fn after_post_send[6];
};

struct ibv_context {
  struct ibv_device* device;
  struct ibv_context_ops ops;
  int cmd_fd;
  int async_fd;
  int num_comp_vectors;
  pthread_mutex_t mutex;
  void* abi_compat;
};

/* Grows towards lower addresses: new entries go at the front, so `sz` says which exist. */
struct verbs_context {
  hmr_ibv_unused_fn query_port;
  int (*advise_mr)(struct ibv_pd* pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                   struct ibv_sge* sg_list, uint32_t num_sges);
  hmr_ibv_unused_fn between_advise_and_query_device_ex[25];
  int (*query_device_ex)(struct ibv_context* context,
                         const struct ibv_query_device_ex_input* input,
                         struct ibv_device_attr_ex* attr, size_t attr_size);
  hmr_ibv_unused_fn after_query_device_ex[10];
  uint64_t abi_placeholder3;
  size_t sz;
  struct ibv_context context;
};

struct ibv_device_attr {
  char fw_ver[64];
  uint64_t node_guid;
  uint64_t sys_image_guid;
  uint64_t max_mr_size;
  uint64_t page_size_cap;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  int max_qp;
  int max_qp_wr;
  unsigned int device_cap_flags;
  int max_sge;
  int max_sge_rd;
  int max_cq;
  int max_cqe;
  int max_mr;
  int max_pd;
  int max_qp_rd_atom;
  int max_ee_rd_atom;
  int max_res_rd_atom;
  int max_qp_init_rd_atom;
  int max_ee_init_rd_atom;
  enum ibv_atomic_cap atomic_cap;
  int max_ee;
  int max_rdd;
  int max_mw;
  int max_raw_ipv6_qp;
  int max_raw_ethy_qp;
  int max_mcast_grp;
  int max_mcast_qp_attach;
  int max_total_mcast_qp_attach;
  int max_ah;
  int max_fmr;
  int max_map_per_fmr;
  int max_srq;
  int max_srq_wr;
  int max_srq_sge;
  uint16_t max_pkeys;
  uint8_t local_ca_ack_delay;
  uint8_t phys_port_cnt;
};

struct ibv_query_device_ex_input {
  uint32_t comp_mask;
};

struct ibv_odp_caps {
  uint64_t general_caps;
  struct {
    uint32_t rc_odp_caps;
    uint32_t uc_odp_caps;
    uint32_t ud_odp_caps;
  } per_transport_caps;
};

/* Declared in full (rdma-core 44) although hmr reads only the head: its size is the attr_size
 * hmr passes, and providers size-check against what applications of their time compiled. */
struct ibv_device_attr_ex {
  struct ibv_device_attr orig_attr;
  uint32_t comp_mask;
  struct ibv_odp_caps odp_caps;
  uint64_t completion_timestamp_mask;
  uint64_t hca_core_clock;
  uint64_t device_cap_flags_ex;
  struct {
    uint32_t max_tso;
    uint32_t supported_qpts;
  } tso_caps;
  struct {
    uint32_t supported_qpts;
    uint32_t max_rwq_indirection_tables;
    uint32_t max_rwq_indirection_table_size;
    uint64_t rx_hash_fields_mask;
    uint8_t rx_hash_function;
  } rss_caps;
  uint32_t max_wq_type_rq;
  struct {
    uint32_t qp_rate_limit_min;
    uint32_t qp_rate_limit_max;
    uint32_t supported_qpts;
  } packet_pacing_caps;
  uint32_t raw_packet_caps;
  struct {
    uint32_t max_rndv_hdr_size;
    uint32_t max_num_tags;
    uint32_t flags;
    uint32_t max_ops;
    uint32_t max_sge;
  } tm_caps;
  struct {
    uint16_t max_cq_count;
    uint16_t max_cq_period;
  } cq_mod_caps;
  uint64_t max_dm_size;
  struct {
    uint16_t fetch_add;
    uint16_t swap;
    uint16_t compare_swap;
  } pci_atomic_caps;
  uint32_t xrc_odp_caps;
  uint32_t phys_port_cnt_ex;
};

struct ibv_pd {
  struct ibv_context* context;
  uint32_t handle;
};

struct ibv_mr {
  struct ibv_context* context;
  struct ibv_pd* pd;
  void* addr;
  size_t length;
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
};

struct ibv_mw {
  struct ibv_context* context;
  struct ibv_pd* pd;
  uint32_t rkey;
  uint32_t handle;
  enum ibv_mw_type type;
};

/* Only the head: the rest of a QP belongs to its provider. */
struct hmr_ibv_qp_head {
  struct ibv_context* context;
};

struct ibv_mw_bind_info {
  struct ibv_mr* mr;
  uint64_t addr;
  uint64_t length;
  unsigned int mw_access_flags;
};

struct ibv_mw_bind {
  uint64_t wr_id;
  unsigned int send_flags;
  struct ibv_mw_bind_info bind_info;
};

struct ibv_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

/* The bind_mw and tso members of struct ibv_send_wr, named here because C++ allows no type to
 * be declared inside an anonymous union. */
struct hmr_ibv_wr_bind_mw {
  struct ibv_mw* mw;
  uint32_t rkey;
  struct ibv_mw_bind_info bind_info;
};
struct hmr_ibv_wr_tso {
  void* hdr;
  uint16_t hdr_sz;
  uint16_t mss;
};

struct ibv_send_wr {
  uint64_t wr_id;
  struct ibv_send_wr* next;
  struct ibv_sge* sg_list;
  int num_sge;
  enum ibv_wr_opcode opcode;
  unsigned int send_flags;
  union {
    uint32_t imm_data;
    uint32_t invalidate_rkey;
  };
  union {
    struct {
      uint64_t remote_addr;
      uint32_t rkey;
    } rdma;
    struct {
      uint64_t remote_addr;
      uint64_t compare_add;
      uint64_t swap;
      uint32_t rkey;
    } atomic;
  } wr;
  union {
    struct {
      uint32_t remote_srqn;
    } xrc;
  } qp_type;
  union {
    struct hmr_ibv_wr_bind_mw bind_mw;
    struct hmr_ibv_wr_tso tso;
  };
};

#ifdef __cplusplus
}  // namespace hmr::verbs
#endif

#endif
