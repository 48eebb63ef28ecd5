/* The test-only entry points of the fake libibverbs (fake_ibverbs.c, built as libibverbs.so.1).
 *
 * Tests reach them with dlsym on the same library the verbs adapter loaded through
 * HMR_IBVERBS_LIBRARY, so both see one instance and one state.  Objects the tests create
 * themselves (a PD to pass as nic_handle, a QP for memory windows) come from the fake's exported
 * verbs and from fake_ibverbs_create_qp. */
#ifndef HMR_TESTS_FAKE_IBVERBS_CONTROL_H
#define HMR_TESTS_FAKE_IBVERBS_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_IBVERBS_MAX_DEVICES 2

/* What one fake device reports and does.  Device 0 defaults to a ConnectX-like device (dma-buf,
 * ODP, memory windows, atomics), device 1 to a device with none of those. */
struct fake_ibverbs_device_config {
  char name[64];
  uint64_t max_mr_size;
  int max_mr;
  int max_mw;
  unsigned int device_cap_flags;   /* IBV_DEVICE_* (memory window bits) */
  int atomic_cap;                  /* IBV_ATOMIC_* */
  int dmabuf_errno;                /* what ibv_reg_dmabuf_mr with fd -1 fails with: EBADF means
                                      the device imports dma-bufs; anything else means it cannot */
  uint64_t odp_general_caps;       /* IBV_ODP_SUPPORT ... */
  uint32_t odp_rc_caps;            /* IBV_ODP_SUPPORT_SEND ... */
  int query_device_ex;             /* 1: the provider fills verbs_context.query_device_ex */
  int advise_mr;                   /* 1: ... verbs_context.advise_mr */
  int memory_window_ops;           /* 1: ... ops.alloc_mw, bind_mw, dealloc_mw */
  int mlx5;                        /* 1: an mlx5 device (mlx5dv_is_supported, UMR, mkeys) */
  int devx_errno;                  /* what mlx5dv_open_device with DEVX fails with (0: works) */
  int link_layer;                  /* port 1: IBV_LINK_LAYER_INFINIBAND or _ETHERNET */
  /* The provider personality (what rdma-core's provider and the kernel driver do): */
  uint32_t vendor_id;              /* ibv_device_attr.vendor_id: 0x02c9 mlx5, 0x1d0f EFA,
                                      0x8086 irdma */
  int node_type;                   /* ibv_device.node_type (IBV_NODE_*) */
  int transport_type;              /* ibv_device.transport_type (IBV_TRANSPORT_*) */
  int rereg_mr;                    /* 1: the provider implements rereg_mr (mlx5); 0: libibverbs'
                                      dummy op answers IBV_REREG_MR_ERR_INPUT, errno EOPNOTSUPP */
  int unbind_derefs_mr;            /* 1: a type 1 unbind (ibv_bind_mw with a NULL MR)
                                      dereferences the MR, as irdma's does: the fake refuses it
                                      with EFAULT instead of crashing */
};

/* One registration the fake made (ibv_reg_mr, ibv_reg_mr_iova2 or ibv_reg_dmabuf_mr). */
struct fake_ibverbs_registration {
  char entry[32];  /* the entry point that made it */
  uint64_t addr;   /* VA, or 0 for a dma-buf */
  uint64_t length;
  uint64_t iova;
  unsigned int access;
  int fd;          /* dma-buf fd, or -1 */
  uint64_t offset; /* dma-buf offset */
  uint32_t lkey, rkey;
  void *pd;
};

/* The last ibv_rereg_mr call. */
struct fake_ibverbs_rereg {
  int flags;
  void *pd;
  uint64_t addr;
  uint64_t length;
  int access;
};

/* The last memory-window operation: a bind_mw verb or a posted work request. */
struct fake_ibverbs_window_op {
  char entry[32];           /* "bind_mw" or "post_send" */
  int opcode;               /* IBV_WR_* for post_send */
  uint64_t wr_id;
  unsigned int send_flags;
  uint32_t new_rkey;        /* the window's key after a bind */
  uint32_t invalidate_rkey; /* IBV_WR_LOCAL_INV */
  void *mr;
  uint64_t addr, length;
  unsigned int mw_access;
};

#define FAKE_IBVERBS_MAX_SGE 16
struct fake_ibverbs_advice {
  int advice;
  uint32_t flags;
  uint32_t num_sge;
  uint64_t addr[FAKE_IBVERBS_MAX_SGE];
  uint32_t length[FAKE_IBVERBS_MAX_SGE];
  uint32_t lkey[FAKE_IBVERBS_MAX_SGE];
};

/* The last UMR the fake completed or failed (mlx5dv_wr_mr_list on a UMR QP, then
 * ibv_wr_complete). */
struct fake_ibverbs_umr {
  uint64_t wr_id;
  unsigned int wr_flags;
  uint32_t mkey_lkey, mkey_rkey;
  uint32_t access;
  uint16_t num_sge;
  uint64_t addr[FAKE_IBVERBS_MAX_SGE];
  uint32_t length[FAKE_IBVERBS_MAX_SGE];
  uint32_t lkey[FAKE_IBVERBS_MAX_SGE];
  int status; /* of its completion: 0 success */
  uint64_t key_length; /* the mkey's length as libmlx5 computed it (see fake_wr_mr_list) */
};

/* Forgets every object, failure, record and counter; restores the default devices and a device
 * list of both.  Objects still alive are freed. */
typedef void (*fake_ibverbs_reset_fn)(void);
/* ibv_get_device_list returns `count` devices; with err != 0 it returns NULL with errno err
 * (a kernel without RDMA gives ENOSYS). */
typedef void (*fake_ibverbs_set_device_list_fn)(int count, int err);
typedef void (*fake_ibverbs_get_device_fn)(int index, struct fake_ibverbs_device_config *config);
/* Takes effect for contexts opened afterwards. */
typedef void (*fake_ibverbs_set_device_fn)(int index,
                                          const struct fake_ibverbs_device_config *config);
/* Makes every later call of entry point `name` (e.g. "ibv_reg_mr_iova2", "advise_mr") fail with
 * errno `err` (0 clears it).  "ibv_reg_mr_iova2#3" fails only the third call from now.
 * "umr:completion" makes the next UMRs complete with error status `err` (posting succeeds). */
typedef void (*fake_ibverbs_set_failure_fn)(const char *name, int err);
/* The kernel's answer on fork: 1 (default) copies pinned pages (5.13+: ibv_is_fork_initialized
 * says IBV_FORK_UNNEEDED, ibv_fork_init does nothing); 0 does not, so ibv_fork_init turns
 * MADV_DONTFORK protection on (for the rest of the process, as in libibverbs), or fails with
 * EINVAL once anything was registered. */
typedef void (*fake_ibverbs_set_fork_kernel_fn)(int copies_pinned_pages);
/* ibv_rereg_mr returns `result` with errno `err` (result 0 restores normal behaviour). */
typedef void (*fake_ibverbs_set_rereg_result_fn)(int result, int err);
/* How often an entry point was called since reset. */
typedef int (*fake_ibverbs_call_count_fn)(const char *name);
/* Objects alive now: "contexts", "pds", "mrs", "mws", "qps", "device_lists", "pinned_pages"
 * (the process's pinned_vm as the fake keeps it, in pages), and the UMR
 * side's "cqs", "umr_qps", "mkeys"; and "destroyed_by_close", the objects (of any kind)
 * ibv_close_device destroyed since reset because nobody had (as the kernel does). */
typedef int (*fake_ibverbs_live_fn)(const char *kind);
/* The registering calls (ibv_reg_mr, _iova2, ibv_reg_dmabuf_mr) and ibv_dereg_mr call `probe`
 * (NULL: nothing) outside the fake's lock and keep its answer, which the second returns for
 * "reg" or "dereg" (-1: no such call since the last read; both are then forgotten).  A Python
 * test passes CPython's PyGILState_Check: whether the calling thread held the GIL. */
typedef void (*fake_ibverbs_set_probe_fn)(int (*probe)(void));
typedef int (*fake_ibverbs_last_probe_fn)(const char *call);
/* The registrations made since reset: copies up to `max`, returns how many there were. */
typedef int (*fake_ibverbs_registrations_fn)(struct fake_ibverbs_registration *out, int max);
typedef void (*fake_ibverbs_last_rereg_fn)(struct fake_ibverbs_rereg *out);
typedef void (*fake_ibverbs_last_window_op_fn)(struct fake_ibverbs_window_op *out);
typedef void (*fake_ibverbs_last_advice_fn)(struct fake_ibverbs_advice *out);
typedef void (*fake_ibverbs_last_umr_fn)(struct fake_ibverbs_umr *out);
/* A QP of `pd`'s context (only what memory windows need of one); freed by destroy or reset. */
typedef void *(*fake_ibverbs_create_qp_fn)(void *pd);
typedef void (*fake_ibverbs_destroy_qp_fn)(void *qp);

#ifdef __cplusplus
}
#endif

#endif
