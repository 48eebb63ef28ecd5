/* A fake libibverbs: a real shared object named libibverbs.so.1 that exports the verbs hmr's
 * verbs adapter looks up, at rdma-core's symbol versions (fake_ibverbs.map), and builds its
 * contexts the way a real provider does (an extended verbs_context whose ops tables carry the
 * verbs rdma-core inlines), so the adapter's real code runs without an RDMA device.
 *
 * Two devices with configurable limits and abilities.  It checks what the kernel checks (PD
 * ownership, access flag rules, mapped memory for pinned registrations, dma-buf fds, window
 * bindings), records every call and the arguments hmr cares about, and fails any entry point
 * with an errno on request.
 *
 * Built against rdma-core's <infiniband/verbs.h> where installed, as a provider would be, and
 * against hmr's own declarations (nic/verbs/verbs_abi.h) elsewhere or when FAKE_IBVERBS_OWN_ABI
 * is defined.  Linked with
 * fake_ibverbs_legacy.map it stands for an rdma-core before 22: ibv_reg_mr_iova2 and
 * ibv_reg_dmabuf_mr are still there but under a version hmr must not accept. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_ibverbs_internal.h"

/* A QP as applications and providers see one: a real struct ibv_qp (context first, then
 * qp_context, then pd: rdma-core's verbs.h), whose public head hmr reads. */
struct fake_qp {
  struct ibv_qp qp;
};

struct fake_mw {
  struct ibv_mw mw;
  struct fake_mr *bound_to; /* type 2 windows bound by a work request */
};

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_device devices[FAKE_IBVERBS_MAX_DEVICES];
struct fake_ibverbs_device_config configs[FAKE_IBVERBS_MAX_DEVICES];
static int list_count = FAKE_IBVERBS_MAX_DEVICES;
static int list_errno;
struct fake_calls fake_verbs_calls = FAKE_CALLS_INITIALIZER;
static int rereg_result, rereg_errno;
uint32_t next_key = 1;

struct fake_context *contexts[MAX_OBJECTS];
struct ibv_pd *pds[MAX_OBJECTS];
struct fake_mr *mrs[MAX_OBJECTS];
static struct fake_mw *mws[MAX_OBJECTS];
static struct fake_qp *qps[MAX_OBJECTS];
static int device_lists;
/* Objects a context's close destroyed because their owner had not (see
 * destroy_objects_of_locked): a leak the kernel would have cleaned up, which tests count. */
static int destroyed_by_close;

/* A function of the test's that the registering calls and ibv_dereg_mr call (outside the
 * fake's lock), and what it answered last for each: a Python test gives CPython's
 * PyGILState_Check, which says whether the calling thread holds the GIL. */
static int (*probe_fn)(void);
static int last_reg_probe = -1, last_dereg_probe = -1;

/* Runs the probe, if any, and keeps its answer in *last. */
static void run_probe(int *last) {
  pthread_mutex_lock(&fake_lock);
  int (*probe)(void) = probe_fn;
  pthread_mutex_unlock(&fake_lock);
  if (probe == NULL) return;
  const int answer = probe();
  pthread_mutex_lock(&fake_lock);
  *last = answer;
  pthread_mutex_unlock(&fake_lock);
}

static struct fake_ibverbs_registration registrations[MAX_REGISTRATIONS];
static int registration_count;
static uint64_t pinned_vm_pages; /* the process's pinned_vm, in pages: see charge_pinned */
/* Fork protection as libibverbs keeps it (libibverbs/memory.c): whether the kernel copies
 * pinned pages on fork (5.13+: ibv_is_fork_initialized answers IBV_FORK_UNNEEDED and
 * ibv_fork_init does nothing), whether ibv_fork_init ran (every registration by address is then
 * madvise(MADV_DONTFORK)'d, for real here), and whether a registration happened before it
 * (too_late: ibv_fork_init then fails with EINVAL). */
static int fork_kernel_copies = 1;
static int fork_enabled;
static int fork_too_late;
static struct fake_ibverbs_rereg last_rereg;
static struct fake_ibverbs_window_op last_window_op;
static struct fake_ibverbs_advice last_advice;

/* ------------------------------------------------------------------ bookkeeping ---------- */

int add_object(void **table, void *object) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (table[i] == NULL) {
      table[i] = object;
      return 1;
    }
  }
  return 0;
}

int remove_object(void **table, const void *object) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (table[i] != NULL && table[i] == object) {
      table[i] = NULL;
      return 1;
    }
  }
  return 0;
}

int has_object(void *const *table, const void *object) {
  if (object == NULL) return 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (table[i] == object) return 1;
  }
  return 0;
}

int count_objects(void *const *table) {
  int count = 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) count += table[i] != NULL;
  return count;
}

const struct fake_ibverbs_device_config *config_of(struct ibv_context *context) {
  return &configs[((struct fake_context *)(void *)((char *)context -
                                                   offsetof(struct verbs_context, context)))
                      ->device];
}

/* Whether `context` has no key left for one more MR (`window` 0) or memory window (1).
 * mlx5 makes MRs, memory windows and indirect mkeys from one table of 1 << log_max_mkey
 * mkeys: mlx5_ib_query_device reports that size as both max_mr and max_mw
 * (drivers/infiniband/hw/mlx5/main.c), and mlx5_ib_alloc_mw, like mlx5_ib_reg_user_mr,
 * fails with -ENOMEM when the firmware has none free.  Elsewhere each kind has the bound
 * ibv_query_device(3) states for it (max_mr, max_mw).  Counted per context: the real table
 * is the device's, shared by every context and process, which the fake does not model. */
int mkeys_full(struct ibv_context *context, int window) {
  const struct fake_ibverbs_device_config *config = config_of(context);
  int mr_count = 0;
  int window_count = 0;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mrs[i] != NULL && mrs[i]->mr.context == context) ++mr_count;
    if (mws[i] != NULL && mws[i]->mw.context == context) ++window_count;
  }
  if (config->mlx5) return mr_count + window_count + umr_mkeys_of(context) >= config->max_mr;
  return window ? window_count >= config->max_mw : mr_count >= config->max_mr;
}

static void default_config(int index, struct fake_ibverbs_device_config *config) {
  memset(config, 0, sizeof *config);
  config->query_device_ex = 1;
  if (index == 0) {
    strcpy(config->name, "fake_mlx5_0");
    config->max_mr_size = 1ull << 46;
    config->max_mr = 1 << 20;
    config->max_mw = 1 << 20; /* mlx5: both are 1 << log_max_mkey (see mkeys_full) */
    config->device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    config->atomic_cap = IBV_ATOMIC_HCA;
    config->dmabuf_errno = EBADF;
    config->odp_general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    config->odp_rc_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                          IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
    config->advise_mr = 1;
    config->memory_window_ops = 1;
    config->mlx5 = 1;
    config->link_layer = IBV_LINK_LAYER_ETHERNET;
    config->vendor_id = 0x02c9; /* Mellanox's OUI, as mlx5 reports it */
    config->node_type = IBV_NODE_CA;
    config->transport_type = IBV_TRANSPORT_IB;
    config->rereg_mr = 1; /* providers/mlx5/verbs.c: mlx5_rereg_mr */
  } else {
    strcpy(config->name, "fake_efa_0");
    config->max_mr_size = 1ull << 32;
    config->max_mr = 1 << 16;
    config->atomic_cap = IBV_ATOMIC_NONE;
    config->dmabuf_errno = EOPNOTSUPP;
    config->link_layer = IBV_LINK_LAYER_UNSPECIFIED;
    /* EFA (providers/efa, drivers/infiniband/hw/efa): Amazon's PCI vendor id, an unspecified
     * node and transport, and no rereg_mr in its verbs_context_ops. */
    config->vendor_id = 0x1d0f;
    config->node_type = IBV_NODE_UNSPECIFIED;
    config->transport_type = IBV_TRANSPORT_UNSPECIFIED;
    config->rereg_mr = 0;
  }
}

static void reset_locked(void) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    free(contexts[i]);
    free(pds[i]);
    free(mrs[i]);
    free(mws[i]);
    free(qps[i]);
    contexts[i] = NULL;
    pds[i] = NULL;
    mrs[i] = NULL;
    mws[i] = NULL;
    qps[i] = NULL;
  }
  for (int i = 0; i < FAKE_IBVERBS_MAX_DEVICES; ++i) {
    default_config(i, &configs[i]);
    memset(&devices[i], 0, sizeof devices[i]);
    devices[i].mlx5 = &fake_mlx5_ops;
  }
  list_count = FAKE_IBVERBS_MAX_DEVICES;
  list_errno = 0;
  fake_calls_reset(&fake_verbs_calls);
  rereg_result = rereg_errno = 0;
  next_key = 1;
  device_lists = 0;
  destroyed_by_close = 0;
  probe_fn = NULL;
  last_reg_probe = last_dereg_probe = -1;
  registration_count = 0;
  pinned_vm_pages = 0;
  fork_kernel_copies = 1;
  fork_too_late = 0;
  /* (fork_enabled stays: libibverbs cannot turn fork protection off, and ranges already
   * advised keep MADV_DONTFORK until deregistered) */
  memset(&last_rereg, 0, sizeof last_rereg);
  memset(&last_window_op, 0, sizeof last_window_op);
  memset(&last_advice, 0, sizeof last_advice);
  umr_reset_locked();
}

/* The devices the control header promises exist from load on, not only after a test's first
 * fake_ibverbs_reset: a process that never calls the controls (hmr-info) sees them too. */
__attribute__((constructor)) static void load_default_devices(void) { reset_locked(); }

/* Whether every page of [addr, addr+length) is mapped: pinning would fail with EFAULT. */
static int range_mapped(uint64_t addr, uint64_t length) {
  const uint64_t page = addr & ~(uint64_t)4095;
  return msync((void *)(uintptr_t)page, length + (addr - page), MS_ASYNC) == 0;
}

/* Whether ib_umem_get could pin [addr, addr + length): every page mapped, and readable, or
 * writable where the access makes the kernel pin for writing (FOLL_WRITE, without FOLL_FORCE
 * since "RDMA/umem: remove FOLL_FORCE usage"): get_user_pages fails with -EFAULT on a
 * PROT_NONE page, and for writing on a read-only one (a mapped file opened O_RDONLY,
 * .rodata).  The protections come from /proc/self/maps. */
static int range_pinnable(uint64_t addr, uint64_t length, int for_writing) {
  if (!range_mapped(addr, length)) return 0;
  FILE *maps = fopen("/proc/self/maps", "re");
  if (maps == NULL) return 1; /* (cannot tell: as before) */
  uint64_t covered = addr & ~(uint64_t)4095;
  const uint64_t end = addr + length;
  char line[512];
  int ok = 1;
  while (ok && covered < end && fgets(line, sizeof line, maps) != NULL) {
    unsigned long long first = 0, last = 0;
    char perms[5] = {0};
    if (sscanf(line, "%llx-%llx %4s", &first, &last, perms) != 3) continue;
    if (last <= covered || first >= end) continue;
    if (perms[0] != 'r' || (for_writing && perms[1] != 'w')) ok = 0;
    covered = last;
  }
  fclose(maps);
  return ok;
}

static int access_valid(unsigned int access) {
  if (access & ~(unsigned int)KNOWN_ACCESS) return 0;
  /* The kernel refuses remote writes or atomics into memory the HCA may not write locally. */
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return 0;
  }
  return 1;
}

static void record_registration(const char *entry, const struct fake_mr *mr, int fd,
                                uint64_t offset) {
  if (registration_count < MAX_REGISTRATIONS) {
    struct fake_ibverbs_registration *record = &registrations[registration_count];
    memset(record, 0, sizeof *record);
    strncpy(record->entry, entry, sizeof record->entry - 1);
    record->addr = fd >= 0 ? 0 : (uint64_t)(uintptr_t)mr->mr.addr;
    record->length = mr->mr.length;
    record->iova = mr->iova;
    record->access = mr->access;
    record->fd = fd;
    record->offset = offset;
    record->lkey = mr->mr.lkey;
    record->rkey = mr->mr.rkey;
    record->pd = mr->mr.pd;
  }
  registration_count++;
}

static void assign_keys(struct fake_mr *mr) {
  const uint32_t index = next_key++;
  mr->mr.lkey = (index << 8) | 0x01;
  mr->mr.rkey = (index << 8) | 0x02;
  mr->mr.handle = index;
}

/* The process's pinned_vm in pages: what live registrations pinned.  ib_umem_get
 * (drivers/infiniband/core/umem.c) charges every page a non-ODP registration by address
 * spans (ib_umem_num_pages) and refuses with -ENOMEM when the total would pass
 * RLIMIT_MEMLOCK >> PAGE_SHIFT, unless the process has CAP_IPC_LOCK; ibv_reg_mr then fails with
 * errno ENOMEM.  A dma-buf (ib_umem_dmabuf_get) and an ODP registration (ib_umem_odp_get)
 * charge nothing.  (pinned_vm_pages, above, is the account.) */
static uint64_t pages_spanned(uintptr_t addr, size_t length) {
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  const uint64_t first = addr & ~(page - 1);
  const uint64_t end = ((uint64_t)addr + length + page - 1) & ~(page - 1);
  return (end - first) / page;
}

static int has_cap_ipc_lock(void) {
  FILE *status = fopen("/proc/self/status", "re");
  if (status == NULL) return 0;
  char line[256];
  int capable = 0;
  while (fgets(line, sizeof line, status) != NULL) {
    if (strncmp(line, "CapEff:", 7) == 0) {
      capable = (int)((strtoull(line + 7, NULL, 16) >> 14) & 1u); /* CAP_IPC_LOCK */
      break;
    }
  }
  fclose(status);
  return capable;
}

/* Charges `pages` to pinned_vm, or ENOMEM as ib_umem_get refuses; the caller holds the lock. */
static int charge_pinned(uint64_t pages) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      pinned_vm_pages + pages > limit.rlim_cur / (uint64_t)sysconf(_SC_PAGESIZE) &&
      !has_cap_ipc_lock()) {
    return ENOMEM;
  }
  pinned_vm_pages += pages;
  return 0;
}

/* The shared part of every registration; the caller holds the lock. */
/* ib_access_writable (include/rdma/ib_verbs.h): what makes ib_umem_get pin with FOLL_WRITE. */
static int access_writable(unsigned int access) {
  return (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                    IBV_ACCESS_MW_BIND)) != 0;
}

static struct ibv_mr *make_mr(const char *entry, struct ibv_pd *pd, void *addr, size_t length,
                              uint64_t iova, unsigned int access, int fd, uint64_t offset) {
  if (!has_object((void *const *)pds, pd) || length == 0 || !access_valid(access)) {
    errno = EINVAL;
    return NULL;
  }
  const struct fake_ibverbs_device_config *config = config_of(pd->context);
  if (length > config->max_mr_size) {
    errno = EINVAL;
    return NULL;
  }
  /* The kernel keeps a registration's offset within its page: ib_uverbs_reg_mr
   * (drivers/infiniband/core/uverbs_cmd.c) refuses a start and an iova (hca_va) whose offsets
   * within a page differ with -EINVAL, and the dma-buf method does the same for the dma-buf
   * offset (ibv_reg_dmabuf_mr below).  ibv_reg_mr passes the address itself as iova. */
  if (fd < 0 && ((((uintptr_t)addr) ^ iova) & ((uint64_t)sysconf(_SC_PAGESIZE) - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  /* libibverbs' ibv_dontfork_range runs before the kernel (ODP aside): with fork protection
   * on, its madvise refuses a range with a hole (ENOMEM), and ibv_reg_mr fails so. */
  if (fd < 0 && addr != NULL && !(access & IBV_ACCESS_ON_DEMAND) && fork_enabled &&
      !range_mapped((uintptr_t)addr, length)) {
    errno = ENOMEM;
    return NULL;
  }
  if ((access & IBV_ACCESS_ON_DEMAND) && !(config->odp_general_caps & IBV_ODP_SUPPORT)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (fd < 0 && !(access & IBV_ACCESS_ON_DEMAND) &&
      !range_pinnable((uintptr_t)addr, length, access_writable(access))) {
    errno = EFAULT;
    return NULL;
  }
  /* A device holds at most max_mr registrations (ibv_query_device); on mlx5 windows and
   * indirect mkeys count too (mkeys_full).  With none free, mlx5_ib_reg_user_mr fails with
   * -ENOMEM, which uverbs passes up and ibv_reg_mr reports as NULL with errno ENOMEM. */
  if (mkeys_full(pd->context, 0)) {
    errno = ENOMEM;
    return NULL;
  }
  const uint64_t pinned = fd < 0 && !(access & IBV_ACCESS_ON_DEMAND)
                              ? pages_spanned((uintptr_t)addr, length) : 0;
  const int pin_err = charge_pinned(pinned);
  if (pin_err != 0) {
    errno = pin_err;
    return NULL;
  }
  struct fake_mr *mr = calloc(1, sizeof *mr);
  if (mr == NULL || !add_object((void **)mrs, mr)) {
    free(mr);
    pinned_vm_pages -= pinned;
    errno = ENOMEM;
    return NULL;
  }
  if (fd < 0 && addr != NULL && !(access & IBV_ACCESS_ON_DEMAND)) {
    /* ibv_dontfork_range: with protection on, the pages go MADV_DONTFORK; without, a later
     * ibv_fork_init is too late.  ibv_reg_mr_iova2 (libibverbs/verbs.c) skips it for ODP,
     * which pins nothing (rdma-core 32 on; 28-31 advised ODP ranges too). */
    if (fork_enabled) {
      const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
      const uintptr_t first = (uintptr_t)addr & ~(page - 1);
      (void)madvise((void *)first, pages_spanned((uintptr_t)addr, length) * page, MADV_DONTFORK);
      mr->dontfork = 1;
    } else {
      fork_too_late = 1;
    }
  }
  mr->pinned_pages = pinned;
  /* (implicit ODP too: ib_umem_odp_alloc_implicit sets writable from the access) */
  mr->writable = access_writable(access);
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->iova = iova;
  mr->access = access;
  assign_keys(mr);
  record_registration(entry, mr, fd, offset);
  return &mr->mr;
}

struct fake_mr *mr_with_lkey(uint32_t lkey) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mrs[i] != NULL && mrs[i]->mr.lkey == lkey) return mrs[i];
  }
  return NULL;
}

static struct fake_mw *mw_with_rkey(uint32_t rkey) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mws[i] != NULL && mws[i]->mw.rkey == rkey) return mws[i];
  }
  return NULL;
}

static uint32_t next_window_key(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xffu); }

/* Checks a window binding as the HCA would; 0 or an errno. */
static int check_binding(struct ibv_mw *mw, const struct ibv_mw_bind_info *info) {
  if (info->mr == NULL) {
    /* irdma's bind_mw (providers/irdma/uverbs.c) reads the MR it is given even for a
     * zero-length unbind: a NULL MR crashes there.  rdma-core's own tests unbind with the
     * bound MR and length 0, which every provider takes.  Refused here instead of crashing. */
    if (config_of(mw->context)->unbind_derefs_mr) return EFAULT;
    return info->addr == 0 && info->length == 0 ? 0 : EINVAL;
  }
  struct fake_mr *mr = (struct fake_mr *)(void *)info->mr;
  if (!has_object((void *const *)mrs, mr)) return EINVAL;
  if (mr->mr.pd != mw->pd) return EPERM;
  if (info->length == 0) return 0; /* an unbind names the MR only */
  /* libmlx5's set_bind_wr (providers/mlx5/qp.c): "KLM support only 2GB". */
  if (config_of(mw->context)->mlx5 && info->length > (1ull << 31)) return EOPNOTSUPP;
  if (!(mr->access & IBV_ACCESS_MW_BIND)) return EACCES;
  if (info->addr < mr->iova || info->length > mr->mr.length ||
      info->addr - mr->iova > mr->mr.length - info->length) {
    return EINVAL;
  }
  return 0;
}

static void record_window_op(const char *entry, int opcode, uint64_t wr_id, unsigned int flags,
                             uint32_t new_rkey, uint32_t invalidate_rkey,
                             const struct ibv_mw_bind_info *info) {
  memset(&last_window_op, 0, sizeof last_window_op);
  strncpy(last_window_op.entry, entry, sizeof last_window_op.entry - 1);
  last_window_op.opcode = opcode;
  last_window_op.wr_id = wr_id;
  last_window_op.send_flags = flags;
  last_window_op.new_rkey = new_rkey;
  last_window_op.invalidate_rkey = invalidate_rkey;
  if (info != NULL) {
    last_window_op.mr = info->mr;
    last_window_op.addr = info->addr;
    last_window_op.length = info->length;
    last_window_op.mw_access = info->mw_access_flags;
  }
}

/* ------------------------------------------------------------------ provider ops --------- */

static int fake_query_device_ex(struct ibv_context *context,
                                const struct ibv_query_device_ex_input *input,
                                struct ibv_device_attr_ex *attr, size_t attr_size);
static int fake_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                          struct ibv_sge *sg_list, uint32_t num_sge);
static struct ibv_mw *fake_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
static int fake_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
static int fake_dealloc_mw(struct ibv_mw *mw);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

static void fill_attr(const struct fake_ibverbs_device_config *config,
                      struct ibv_device_attr *attr) {
  memset(attr, 0, sizeof *attr);
  strcpy(attr->fw_ver, "1.0-fake");
  attr->max_mr_size = config->max_mr_size;
  attr->page_size_cap = 4096;
  attr->max_mr = config->max_mr;
  attr->max_mw = config->max_mw;
  attr->max_pd = 1 << 16;
  attr->device_cap_flags = config->device_cap_flags;
  attr->atomic_cap = (enum ibv_atomic_cap)config->atomic_cap;
  attr->phys_port_cnt = 1;
  attr->vendor_id = config->vendor_id;
}

static int fake_query_device_ex(struct ibv_context *context,
                                const struct ibv_query_device_ex_input *input,
                                struct ibv_device_attr_ex *attr, size_t attr_size) {
  (void)input;
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "query_device_ex");
  if (err == 0) {
    /* Fill a full struct, hand out what the caller's size has room for: callers compiled
     * against older headers pass smaller sizes. */
    struct ibv_device_attr_ex full;
    memset(&full, 0, sizeof full);
    const struct fake_ibverbs_device_config *config = config_of(context);
    fill_attr(config, &full.orig_attr);
    full.odp_caps.general_caps = config->odp_general_caps;
    full.odp_caps.per_transport_caps.rc_odp_caps = config->odp_rc_caps;
    if (attr_size < sizeof full.orig_attr) {
      err = EINVAL;
    } else {
      memcpy(attr, &full, attr_size < sizeof full ? attr_size : sizeof full);
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

static int fake_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                          struct ibv_sge *sg_list, uint32_t num_sge) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "advise_mr");
  if (err == 0) {
    memset(&last_advice, 0, sizeof last_advice);
    last_advice.advice = (int)advice;
    last_advice.flags = flags;
    last_advice.num_sge = num_sge;
    if (num_sge == 0 || (int)advice < 0 || (int)advice > 2) err = EINVAL;
    for (uint32_t i = 0; err == 0 && i < num_sge; ++i) {
      struct fake_mr *mr = mr_with_lkey(sg_list[i].lkey);
      /* Prefetching needs an ODP MR of this PD that covers the entry, in the MR's addresses. */
      if (mr == NULL || mr->mr.pd != pd || !(mr->access & IBV_ACCESS_ON_DEMAND) ||
          sg_list[i].addr < mr->iova ||
          sg_list[i].addr + sg_list[i].length > mr->iova + mr->mr.length) {
        err = EINVAL;
      } else if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
                 !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
        /* mlx5's get_prefetchable_mr (drivers/infiniband/hw/mlx5/odp.c): "prefetch with
         * write-access must be supported by the MR" — a umem that is not writable (no
         * LOCAL_WRITE) is refused with -EPERM (before 5.15 the MR was not found: -EINVAL). */
        err = EPERM;
      }
      if (i < FAKE_IBVERBS_MAX_SGE) {
        last_advice.addr[i] = sg_list[i].addr;
        last_advice.length[i] = sg_list[i].length;
        last_advice.lkey[i] = sg_list[i].lkey;
      }
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

static struct ibv_mw *fake_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type) {
  pthread_mutex_lock(&fake_lock);
  struct fake_mw *mw = NULL;
  int err = fake_calls_enter(&fake_verbs_calls, "alloc_mw");
  if (err == 0 && !has_object((void *const *)pds, pd)) err = EINVAL;
  if (err == 0) {
    const struct fake_ibverbs_device_config *config = config_of(pd->context);
    const unsigned int needed = type == IBV_MW_TYPE_1 ? IBV_DEVICE_MEM_WINDOW
                                                      : IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                                            IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
      err = EINVAL;
    } else if (!(config->device_cap_flags & needed)) {
      err = EOPNOTSUPP;
    } else if (mkeys_full(pd->context, 1)) {
      err = ENOMEM;
    }
  }
  if (err == 0) {
    mw = calloc(1, sizeof *mw);
    if (mw == NULL || !add_object((void **)mws, mw)) {
      free(mw);
      mw = NULL;
      err = ENOMEM;
    }
  }
  if (mw != NULL) {
    const uint32_t index = next_key++;
    mw->mw.context = pd->context;
    mw->mw.pd = pd;
    mw->mw.rkey = (index << 8) | 0x40;
    mw->mw.handle = index;
    mw->mw.type = type;
  }
  pthread_mutex_unlock(&fake_lock);
  if (mw == NULL) errno = err;
  return mw != NULL ? &mw->mw : NULL;
}

static int fake_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "bind_mw");
  if (err == 0 && (!has_object((void *const *)qps, qp) || !has_object((void *const *)mws, mw) ||
                   mw->type != IBV_MW_TYPE_1)) {
    err = EINVAL;
  }
  if (err == 0) err = check_binding(mw, &mw_bind->bind_info);
  if (err == 0) {
    mw->rkey = next_window_key(mw->rkey);
    record_window_op("bind_mw", IBV_WR_BIND_MW, mw_bind->wr_id, mw_bind->send_flags, mw->rkey, 0,
                     &mw_bind->bind_info);
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

static int fake_dealloc_mw(struct ibv_mw *mw) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "dealloc_mw");
  if (err == 0 && !remove_object((void **)mws, mw)) err = EINVAL;
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(mw);
  return err;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "post_send");
  if (err == 0 && !has_object((void *const *)qps, qp)) err = EINVAL;
  if (err == 0 && wr->opcode == IBV_WR_BIND_MW) {
    struct ibv_mw *mw = wr->bind_mw.mw;
    if (!has_object((void *const *)mws, mw) || mw->type != IBV_MW_TYPE_2 ||
        (wr->bind_mw.rkey & ~0xffu) != (mw->rkey & ~0xffu)) {
      err = EINVAL;
    }
    if (err == 0) err = check_binding(mw, &wr->bind_mw.bind_info);
    if (err == 0) {
      mw->rkey = wr->bind_mw.rkey;
      ((struct fake_mw *)(void *)mw)->bound_to = (struct fake_mr *)(void *)wr->bind_mw.bind_info.mr;
      record_window_op("post_send", IBV_WR_BIND_MW, wr->wr_id, wr->send_flags, mw->rkey, 0,
                       &wr->bind_mw.bind_info);
    }
  } else if (err == 0 && wr->opcode == IBV_WR_LOCAL_INV) {
    struct fake_mw *mw = mw_with_rkey(wr->invalidate_rkey);
    if (mw != NULL) mw->bound_to = NULL;
    /* An unknown key would complete in error on the CQ; posting itself succeeds. */
    record_window_op("post_send", IBV_WR_LOCAL_INV, wr->wr_id, wr->send_flags, 0,
                     wr->invalidate_rkey, NULL);
  } else if (err == 0) {
    err = EINVAL; /* the fake carries no data */
  }
  pthread_mutex_unlock(&fake_lock);
  if (err != 0 && bad_wr != NULL) *bad_wr = wr;
  return err;
}

/* ------------------------------------------------------------------ exported verbs ------- */

EXPORT struct ibv_device **(ibv_get_device_list)(int *num_devices) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_get_device_list");
  if (err == 0) err = list_errno;
  struct ibv_device **list = NULL;
  if (err == 0) {
    list = calloc((size_t)list_count + 1, sizeof *list);
    if (list == NULL) err = ENOMEM;
  }
  if (list != NULL) {
    for (int i = 0; i < list_count; ++i) {
      struct ibv_device *device = &devices[i].device;
      memset(device, 0, sizeof *device);
      _Static_assert(sizeof device->name == sizeof configs[i].name, "device names differ");
      memcpy(device->name, configs[i].name, sizeof device->name);
      device->name[sizeof device->name - 1] = '\0';
      strcpy(device->dev_name, i == 0 ? "uverbs0" : "uverbs1");
      device->node_type = (enum ibv_node_type)configs[i].node_type;
      device->transport_type = (enum ibv_transport_type)configs[i].transport_type;
      list[i] = device;
    }
    device_lists++;
    if (num_devices != NULL) *num_devices = list_count;
  }
  pthread_mutex_unlock(&fake_lock);
  if (list == NULL) errno = err;
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) {
  pthread_mutex_lock(&fake_lock);
  fake_calls_enter(&fake_verbs_calls, "ibv_free_device_list");
  if (list != NULL) device_lists--;
  pthread_mutex_unlock(&fake_lock);
  free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device) {
  pthread_mutex_lock(&fake_lock);
  fake_calls_enter(&fake_verbs_calls, "ibv_get_device_name");
  pthread_mutex_unlock(&fake_lock);
  return device->name;
}

struct fake_context *make_context_locked(int index, int devx, int *err) {
  if (index < 0 || index >= FAKE_IBVERBS_MAX_DEVICES) {
    *err = ENODEV;
    return NULL;
  }
  struct fake_context *context = calloc(1, sizeof *context);
  if (context == NULL || !add_object((void **)contexts, context)) {
    free(context);
    *err = ENOMEM;
    return NULL;
  }
  const struct fake_ibverbs_device_config *config = &configs[index];
  context->device = index;
  context->devx = devx;
  context->vctx.sz = sizeof context->vctx;
  context->vctx.context.device = &devices[index].device;
  context->vctx.context.abi_compat = FAKE_ABI_IS_EXTENDED;
  context->vctx.context.cmd_fd = -1;
  context->vctx.context.async_fd = -1;
  if (config->query_device_ex) context->vctx.query_device_ex = fake_query_device_ex;
  if (config->advise_mr) context->vctx.advise_mr = fake_advise_mr;
  if (config->memory_window_ops) {
    context->vctx.context.ops.alloc_mw = fake_alloc_mw;
    context->vctx.context.ops.bind_mw = fake_bind_mw;
    context->vctx.context.ops.dealloc_mw = fake_dealloc_mw;
  }
  context->vctx.context.ops.post_send = fake_post_send;
  umr_install_context_ops(context);
  return context;
}

struct fake_context *fake_context_of(struct ibv_context *context) {
  return (struct fake_context *)(void *)((char *)context - offsetof(struct verbs_context, context));
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_open_device");
  struct fake_context *context = NULL;
  if (err == 0) {
    context = make_context_locked((int)((struct fake_device *)(void *)device - devices), 0, &err);
  }
  pthread_mutex_unlock(&fake_lock);
  if (context == NULL) errno = err;
  return context != NULL ? &context->vctx.context : NULL;
}

static void undo_dontfork_locked(const struct fake_mr *gone);

/* What closing a context does to the objects still on it: rdma-core's ibv_close_device closes
 * the uverbs file, and the kernel's release of it (ib_uverbs_close -> uverbs_destroy_ufile_hw)
 * destroys every object made through it, windows, MRs (their pages unpinned), QPs, CQs and
 * PDs, whatever the application still holds.  (libibverbs leaks its own structs of them; the
 * fake frees them, so a later use is caught by AddressSanitizer.) */
static void destroy_objects_of_locked(const struct ibv_context *context) {
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (mws[i] != NULL && mws[i]->mw.pd->context == context) {
      free(mws[i]);
      mws[i] = NULL;
      ++destroyed_by_close;
    }
  }
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    struct fake_mr *mr = mrs[i];
    if (mr == NULL || mr->mr.pd->context != context) continue;
    mrs[i] = NULL;
    pinned_vm_pages -= mr->pinned_pages;
    if (mr->dontfork) undo_dontfork_locked(mr);
    free(mr);
    ++destroyed_by_close;
  }
  destroyed_by_close += umr_destroy_context_locked(context);
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (qps[i] != NULL && qps[i]->qp.context == context) {
      free(qps[i]);
      qps[i] = NULL;
      ++destroyed_by_close;
    }
  }
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    if (pds[i] != NULL && pds[i]->context == context) {
      free(pds[i]);
      pds[i] = NULL;
      ++destroyed_by_close;
    }
  }
}

EXPORT int ibv_close_device(struct ibv_context *context) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_close_device");
  struct fake_context *owner =
      (struct fake_context *)(void *)((char *)context - offsetof(struct verbs_context, context));
  if (err == 0 && !remove_object((void **)contexts, owner)) err = EINVAL;
  if (err == 0) destroy_objects_of_locked(context);
  pthread_mutex_unlock(&fake_lock);
  if (err != 0) {
    errno = err;
    return -1;
  }
  free(owner);
  return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
  pthread_mutex_lock(&fake_lock);
  const int err = fake_calls_enter(&fake_verbs_calls, "ibv_query_device");
  if (err == 0) fill_attr(config_of(context), attr);
  pthread_mutex_unlock(&fake_lock);
  return err;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_alloc_pd");
  struct ibv_pd *pd = NULL;
  if (err == 0) {
    pd = calloc(1, sizeof *pd);
    if (pd == NULL || !add_object((void **)pds, pd)) {
      free(pd);
      pd = NULL;
      err = ENOMEM;
    }
  }
  if (pd != NULL) {
    pd->context = context;
    pd->handle = next_key++;
  }
  pthread_mutex_unlock(&fake_lock);
  if (pd == NULL) errno = err;
  return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_dealloc_pd");
  if (err == 0 && !has_object((void *const *)pds, pd)) err = EINVAL;
  /* The kernel's uverbs_free_pd refuses while the PD's usecnt is not 0: every QP, MR, MW
   * (and SRQ, AH, mkey) made on it counts. */
  for (int i = 0; err == 0 && i < MAX_OBJECTS; ++i) {
    if ((mrs[i] != NULL && mrs[i]->mr.pd == pd) || (mws[i] != NULL && mws[i]->mw.pd == pd) ||
        (qps[i] != NULL && qps[i]->qp.pd == pd)) {
      err = EBUSY;
    }
  }
  if (err == 0 && umr_objects_on_pd(pd) != 0) err = EBUSY;
  if (err == 0) remove_object((void **)pds, pd);
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(pd);
  return err;
}

EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access) {
  run_probe(&last_reg_probe);
  pthread_mutex_lock(&fake_lock);
  const int err = fake_calls_enter(&fake_verbs_calls, "ibv_reg_mr");
  struct ibv_mr *mr = NULL;
  if (err == 0) {
    mr = make_mr("ibv_reg_mr", pd, addr, length, (uintptr_t)addr, (unsigned int)access, -1, 0);
  }
  const int saved = errno;
  pthread_mutex_unlock(&fake_lock);
  errno = err != 0 ? err : saved;
  return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access) {
  run_probe(&last_reg_probe);
  pthread_mutex_lock(&fake_lock);
  const int err = fake_calls_enter(&fake_verbs_calls, "ibv_reg_mr_iova2");
  struct ibv_mr *mr = NULL;
  if (err == 0) mr = make_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access, -1, 0);
  const int saved = errno;
  pthread_mutex_unlock(&fake_lock);
  errno = err != 0 ? err : saved;
  return mr;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                        uint64_t iova, int fd, int access) {
  run_probe(&last_reg_probe);
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_reg_dmabuf_mr");
  struct ibv_mr *mr = NULL;
  if (err == 0 && !has_object((void *const *)pds, pd)) err = EINVAL;
  if (err == 0) {
    const struct fake_ibverbs_device_config *config = config_of(pd->context);
    /* A device that imports looks the fd up first; one that cannot refuses before looking. */
    if (config->dmabuf_errno != EBADF) {
      err = config->dmabuf_errno;
    } else {
      struct stat status;
      if (fd < 0 || fstat(fd, &status) != 0) {
        err = EBADF;
      } else if (offset + length > (uint64_t)status.st_size || offset + length < offset) {
        err = EINVAL;
      }
    }
    /* UVERBS_METHOD_REG_DMABUF_MR (drivers/infiniband/core/uverbs_std_types_mr.c) refuses a
     * dma-buf offset and an iova whose offsets within a page differ, and takes only these
     * access bits (uverbs_get_flags32 with LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE,
     * REMOTE_ATOMIC, RELAXED_ORDERING): ON_DEMAND, MW_BIND, ZERO_BASED are -EINVAL. */
    const unsigned int dmabuf_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                                       IBV_ACCESS_RELAXED_ORDERING;
    if (err == 0 && (((offset ^ iova) & ((uint64_t)sysconf(_SC_PAGESIZE) - 1)) != 0 ||
                     ((unsigned int)access & ~dmabuf_access) != 0)) {
      err = EINVAL;
    }
  }
  if (err == 0) {
    mr = make_mr("ibv_reg_dmabuf_mr", pd, NULL, length, iova, (unsigned int)access, fd, offset);
    if (mr == NULL) err = errno;
  }
  pthread_mutex_unlock(&fake_lock);
  if (mr == NULL) errno = err;
  return mr;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                        size_t length, int access) {
  pthread_mutex_lock(&fake_lock);
  int result = 0;
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_rereg_mr");
  last_rereg.flags = flags;
  last_rereg.pd = pd;
  last_rereg.addr = (uintptr_t)addr;
  last_rereg.length = length;
  last_rereg.access = access;
  struct fake_mr *fake = (struct fake_mr *)(void *)mr;
  const int known = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                    IBV_REREG_MR_CHANGE_ACCESS;
  if (err == 0 && rereg_result != 0) {
    result = rereg_result;
    err = rereg_errno;
  } else if (err == 0 && has_object((void *const *)mrs, fake) &&
             !config_of(fake->mr.context)->rereg_mr) {
    /* A provider without rereg_mr (EFA, bnxt_re; irdma before rdma-core 49) gets libibverbs'
     * dummy op (libibverbs/dummy_ops.c): errno EOPNOTSUPP, IBV_REREG_MR_ERR_INPUT, MR untouched. */
    result = IBV_REREG_MR_ERR_INPUT;
    err = EOPNOTSUPP;
  } else if (err != 0) {
    result = IBV_REREG_MR_ERR_CMD;
  } else if (!has_object((void *const *)mrs, fake) || flags == 0 || (flags & ~known) ||
             ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (addr == NULL || length == 0)) ||
             (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
             ((flags & IBV_REREG_MR_CHANGE_PD) && !has_object((void *const *)pds, pd)) ||
             ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !access_valid((unsigned int)access))) {
    result = IBV_REREG_MR_ERR_INPUT;
    err = EINVAL;
  } else if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !(flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
             access_writable((unsigned int)access) && !fake->writable) {
    /* ib_umem_check_rereg (drivers/infiniband/core/umem.c; "RDMA: During rereg_mr ensure that
     * REREG_ACCESS is compatible", upstream and stable since June 2026), called by mlx5, rxe,
     * hns and the rest before they change anything: memory pinned read-only cannot become
     * writable without being pinned again (CHANGE_TRANSLATION): -EACCES, the MR untouched. */
    result = IBV_REREG_MR_ERR_CMD;
    err = EACCES;
  } else if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
             !((flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned int)access : fake->access) &
               IBV_ACCESS_ON_DEMAND) &&
             !range_pinnable((uintptr_t)addr, length,
                             access_writable(flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned int)access
                                                                                 : fake->access))) {
    result = IBV_REREG_MR_ERR_CMD;
    err = EFAULT;
  } else if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && fake->pinned_pages != 0 &&
             (err = charge_pinned(pages_spanned((uintptr_t)addr, length))) != 0) {
    /* mlx5_ib_rereg_user_mr gets the new umem (charged) before it releases the old one. */
    result = IBV_REREG_MR_ERR_CMD;
  } else {
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && fake->pinned_pages != 0) {
      pinned_vm_pages -= fake->pinned_pages;
      fake->pinned_pages = pages_spanned((uintptr_t)addr, length);
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      fake->mr.addr = addr;
      fake->mr.length = length;
      fake->iova = (uintptr_t)addr;
      /* a new umem, pinned for the access it is given now */
      fake->writable = access_writable(flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned int)access
                                                                          : fake->access);
    }
    if (flags & IBV_REREG_MR_CHANGE_PD) fake->mr.pd = pd;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) fake->access = (unsigned int)access;
    assign_keys(fake); /* a device may hand out new keys; hmr must pick them up */
  }
  pthread_mutex_unlock(&fake_lock);
  if (result != 0) errno = err;
  return result;
}


EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  run_probe(&last_dereg_probe);
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_dereg_mr");
  struct fake_mr *fake = (struct fake_mr *)(void *)mr;
  if (err == 0 && !has_object((void *const *)mrs, fake)) err = EINVAL;
  for (int i = 0; err == 0 && i < MAX_OBJECTS; ++i) {
    if (mws[i] != NULL && mws[i]->bound_to == fake) err = EBUSY; /* a type 2 window is bound */
  }
  if (err == 0) {
    remove_object((void **)mrs, fake);
    pinned_vm_pages -= fake->pinned_pages;
    if (fake->dontfork) undo_dontfork_locked(fake);
  }
  pthread_mutex_unlock(&fake_lock);
  if (err == 0) free(fake);
  return err;
}

/* ibv_dofork_range: the pages of a deregistered MR may be inherited again, unless another
 * protected MR still covers them (libibverbs keeps a reference count per range). */
static void undo_dontfork_locked(const struct fake_mr *gone) {
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  const uintptr_t first = (uintptr_t)gone->mr.addr & ~(page - 1);
  const uintptr_t end = first + pages_spanned((uintptr_t)gone->mr.addr, gone->mr.length) * page;
  for (int i = 0; i < MAX_OBJECTS; ++i) {
    const struct fake_mr *other = mrs[i];
    if (other == NULL || !other->dontfork) continue;
    const uintptr_t other_first = (uintptr_t)other->mr.addr & ~(page - 1);
    const uintptr_t other_end =
        other_first + pages_spanned((uintptr_t)other->mr.addr, other->mr.length) * page;
    if (other_first < end && first < other_end) return;
  }
  (void)madvise((void *)first, end - first, MADV_DOFORK);
}

EXPORT int ibv_fork_init(void) {
  pthread_mutex_lock(&fake_lock);
  int err = fake_calls_enter(&fake_verbs_calls, "ibv_fork_init");
  if (err == 0 && !fork_enabled && !fork_kernel_copies) {
    if (fork_too_late) {
      err = EINVAL;
    } else {
      fork_enabled = 1;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return err;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) {
  pthread_mutex_lock(&fake_lock);
  (void)fake_calls_enter(&fake_verbs_calls, "ibv_is_fork_initialized");
  const enum ibv_fork_status status = fork_kernel_copies ? IBV_FORK_UNNEEDED
                                      : fork_enabled     ? IBV_FORK_ENABLED
                                                         : IBV_FORK_DISABLED;
  pthread_mutex_unlock(&fake_lock);
  return status;
}

/* ------------------------------------------------------------------ test control --------- */

EXPORT void fake_ibverbs_reset(void) {
  pthread_mutex_lock(&fake_lock);
  reset_locked();
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_set_device_list(int count, int err) {
  pthread_mutex_lock(&fake_lock);
  list_count = count < 0 ? 0 : count > FAKE_IBVERBS_MAX_DEVICES ? FAKE_IBVERBS_MAX_DEVICES : count;
  list_errno = err;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_get_device(int index, struct fake_ibverbs_device_config *config) {
  pthread_mutex_lock(&fake_lock);
  *config = configs[index];
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_set_device(int index, const struct fake_ibverbs_device_config *config) {
  pthread_mutex_lock(&fake_lock);
  configs[index] = *config;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_set_failure(const char *name, int err) {
  char base[FAKE_NAME_LEN];
  strncpy(base, name, FAKE_NAME_LEN - 1);
  base[FAKE_NAME_LEN - 1] = '\0';
  int countdown = 0;
  char *hash = strchr(base, '#');
  if (hash != NULL) {
    countdown = atoi(hash + 1);
    *hash = '\0';
  }
  fake_calls_set_failure(&fake_verbs_calls, base, err, countdown);
}

EXPORT void fake_ibverbs_set_fork_kernel(int copies_pinned_pages) {
  pthread_mutex_lock(&fake_lock);
  fork_kernel_copies = copies_pinned_pages;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_set_rereg_result(int result, int err) {
  pthread_mutex_lock(&fake_lock);
  rereg_result = result;
  rereg_errno = err;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT int fake_ibverbs_call_count(const char *name) {
  return fake_calls_count(&fake_verbs_calls, name);
}

EXPORT int fake_ibverbs_live(const char *kind) {
  pthread_mutex_lock(&fake_lock);
  int count = -1;
  if (strcmp(kind, "contexts") == 0) count = count_objects((void *const *)contexts);
  if (strcmp(kind, "pds") == 0) count = count_objects((void *const *)pds);
  if (strcmp(kind, "mrs") == 0) count = count_objects((void *const *)mrs);
  if (strcmp(kind, "mws") == 0) count = count_objects((void *const *)mws);
  if (strcmp(kind, "qps") == 0) count = count_objects((void *const *)qps);
  if (strcmp(kind, "device_lists") == 0) count = device_lists;
  if (strcmp(kind, "destroyed_by_close") == 0) count = destroyed_by_close;
  if (strcmp(kind, "pinned_pages") == 0) count = (int)pinned_vm_pages;
  if (count < 0) count = umr_live(kind);
  pthread_mutex_unlock(&fake_lock);
  return count;
}

EXPORT int fake_ibverbs_registrations(struct fake_ibverbs_registration *out, int max) {
  pthread_mutex_lock(&fake_lock);
  const int count = registration_count;
  for (int i = 0; i < max && i < count && i < MAX_REGISTRATIONS; ++i) out[i] = registrations[i];
  pthread_mutex_unlock(&fake_lock);
  return count;
}

EXPORT void fake_ibverbs_last_rereg(struct fake_ibverbs_rereg *out) {
  pthread_mutex_lock(&fake_lock);
  *out = last_rereg;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_set_probe(int (*probe)(void)) {
  pthread_mutex_lock(&fake_lock);
  probe_fn = probe;
  last_reg_probe = last_dereg_probe = -1;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT int fake_ibverbs_last_probe(const char *call) {
  pthread_mutex_lock(&fake_lock);
  const int answer = strcmp(call, "reg") == 0     ? last_reg_probe
                     : strcmp(call, "dereg") == 0 ? last_dereg_probe
                                                  : -2;
  last_reg_probe = last_dereg_probe = -1;  /* (read once: the next answer is a new call's) */
  pthread_mutex_unlock(&fake_lock);
  return answer;
}

EXPORT void fake_ibverbs_last_window_op(struct fake_ibverbs_window_op *out) {
  pthread_mutex_lock(&fake_lock);
  *out = last_window_op;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void fake_ibverbs_last_advice(struct fake_ibverbs_advice *out) {
  pthread_mutex_lock(&fake_lock);
  *out = last_advice;
  pthread_mutex_unlock(&fake_lock);
}

EXPORT void *fake_ibverbs_create_qp(void *pd_pointer) {
  struct ibv_pd *pd = pd_pointer;
  pthread_mutex_lock(&fake_lock);
  struct fake_qp *qp = NULL;
  if (has_object((void *const *)pds, pd)) {
    qp = calloc(1, sizeof *qp);
    if (qp != NULL && add_object((void **)qps, qp)) {
      qp->qp.context = pd->context;
      qp->qp.pd = pd;
    } else {
      free(qp);
      qp = NULL;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return qp;
}

EXPORT void fake_ibverbs_destroy_qp(void *qp) {
  pthread_mutex_lock(&fake_lock);
  const int removed = remove_object((void **)qps, qp);
  pthread_mutex_unlock(&fake_lock);
  if (removed) free(qp);
}
