/* What the parts of the fake libibverbs share: fake_ibverbs.c (devices, contexts, PDs, MRs,
 * windows, test controls) and fake_ibverbs_umr.c (completion queues, the mlx5 UMR queue pair
 * and indirect mkeys).  Hidden inside the shared object (C_VISIBILITY_PRESET hidden); only
 * EXPORT makes a symbol visible. */
#ifndef HMR_TESTS_FAKE_IBVERBS_INTERNAL_H
#define HMR_TESTS_FAKE_IBVERBS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fake_ibverbs_control.h"
#include "fake_mlx5_provider.h"
#include "fake_support.h"

#define EXPORT __attribute__((visibility("default")))

#define MAX_OBJECTS 4096
#define MAX_REGISTRATIONS 2048

#define KNOWN_ACCESS                                                                        \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |             \
   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |                 \
   IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | FAKE_OPTIONAL_ACCESS)

struct fake_context {
  struct verbs_context vctx; /* the application sees &vctx.context */
  int device;
  int devx; /* opened by mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX */
};

struct fake_mr {
  struct ibv_mr mr;
  uint64_t iova;
  unsigned int access;
  uint64_t pinned_pages; /* charged to the process's pinned_vm (0: ODP or dma-buf) */
  int dontfork;          /* its pages were madvise(MADV_DONTFORK)'d (fork protection on) */
  int writable;          /* its umem was pinned for writing (ib_umem's `writable`, kept by a
                          * change of access alone, set anew by a new translation) */
};

/* The one lock of the fake, and its call counts and injected failures. */
extern pthread_mutex_t fake_lock;
extern struct fake_calls fake_verbs_calls;
extern struct fake_device devices[FAKE_IBVERBS_MAX_DEVICES];
extern struct fake_ibverbs_device_config configs[FAKE_IBVERBS_MAX_DEVICES];
extern struct fake_context *contexts[MAX_OBJECTS];
extern struct ibv_pd *pds[MAX_OBJECTS];
extern struct fake_mr *mrs[MAX_OBJECTS];
extern uint32_t next_key;

/* Object tables: fixed arrays of pointers, NULL for a free entry. */
int add_object(void **table, void *object);
int remove_object(void **table, const void *object);
int has_object(void *const *table, const void *object);
int count_objects(void *const *table);

const struct fake_ibverbs_device_config *config_of(struct ibv_context *context);
struct fake_context *fake_context_of(struct ibv_context *context);
struct fake_mr *mr_with_lkey(uint32_t lkey);
/* A context of device `index` (the lock held); NULL with *err set when none can be made. */
struct fake_context *make_context_locked(int index, int devx, int *err);

/* fake_ibverbs_umr.c: its objects freed and its records cleared by fake_ibverbs_reset (the lock
 * held), its context ops installed in every new context, its mlx5 table for every device. */
void umr_reset_locked(void);
void umr_install_context_ops(struct fake_context *context);
extern const struct fake_mlx5_ops fake_mlx5_ops;
int umr_live(const char *kind); /* -1 for a kind it does not keep */
int umr_mkeys_of(struct ibv_context *context); /* indirect mkeys made on `context` */
int umr_objects_on_pd(const struct ibv_pd *pd); /* UMR QPs and mkeys made on `pd` */
/* Frees the CQs, UMR QPs and mkeys of `context` (its close: the kernel destroys them); how
 * many there were. */
int umr_destroy_context_locked(const struct ibv_context *context);
/* Whether `context` has no key left for one more MR (`window` 0) or memory window (1). */
int mkeys_full(struct ibv_context *context, int window);

#endif
