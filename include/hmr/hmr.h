/*
 * hmr — heterogeneous memory registration.  Public C ABI.
 *
 * Names and numeric values follow libfabric's fi_mr(3) / fi_domain(3) one to one wherever
 * libfabric has the same concept, so a libfabric user finds them without a manual and the
 * libfabric adapter passes them through unchanged.
 *
 * Conventions:
 *  - Functions return 0 (or a count) on success and a negative HMR_E* code on failure.
 *  - After any failure, hmr_last_error() gives a human reason for the calling thread.
 *  - Output parameters are written only on success.
 *  - Every attribute struct starts with `size`: set it to sizeof(the struct) you compiled
 *    against.  hmr reads only that many bytes, so old binaries keep working as structs grow.
 */
#ifndef HMR_HMR_H
#define HMR_HMR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HMR_BUILDING_LIBRARY)
#define HMR_API __attribute__((visibility("default")))
#else
#define HMR_API
#endif

#define HMR_VERSION_MAJOR 0
#define HMR_VERSION_MINOR 1
#define HMR_VERSION_PATCH 0
/* Version of the library actually loaded: (major << 16) | (minor << 8) | patch. */
HMR_API uint32_t hmr_version(void);

/* ---------------------------------------------------------------- errors ---------------- */
/* Positive values; functions return them negated.  Same numbers as libfabric's FI_E*. */
enum hmr_errno {
	HMR_SUCCESS = 0,
	HMR_EPERM = 1,
	HMR_ENOENT = 2,
	HMR_EIO = 5,
	HMR_EBADF = 9,
	HMR_EAGAIN = 11,
	HMR_ENOMEM = 12,
	HMR_EACCES = 13,
	HMR_EFAULT = 14,
	HMR_EBUSY = 16,
	HMR_ENODEV = 19,
	HMR_EINVAL = 22,
	HMR_ENOSPC = 28,
	HMR_ERANGE = 34,
	HMR_ENOSYS = 38,
	HMR_ENODATA = 61,
	HMR_EOPNOTSUPP = 95,
	HMR_EALREADY = 114,
	HMR_ETIMEDOUT = 110,
	HMR_EKEYREJECTED = 129,
	HMR_ETOOSMALL = 257, /* a caller's buffer is too small; the needed size was written back */
	HMR_EBADFLAGS = 260, /* unknown or contradictory flags */
	HMR_EAVAIL = 259,    /* an error entry is waiting on an event queue: read it with readerr */
	HMR_ENOKEY = 266,    /* the requested key is already in use in this domain */
};

/* Short description of an error code (accepts positive or negative values). Never NULL. */
HMR_API const char *hmr_strerror(int err);
/* The reason for the most recent failure on this thread ("" if none yet). Never NULL.
 * Valid until the next hmr call on this thread. */
HMR_API const char *hmr_last_error(void);

/* ---------------------------------------------------------------- constants ------------- */
/* mr_mode bits (fi_domain(3)). */
#define HMR_MR_UNSPEC 0ULL
#define HMR_MR_BASIC (1ULL << 0)    /* = VIRT_ADDR | ALLOCATED | PROV_KEY */
#define HMR_MR_SCALABLE (1ULL << 1) /* = none of those: offsets and requested keys */
#define HMR_MR_LOCAL (1ULL << 2)
#define HMR_MR_RAW (1ULL << 3)
#define HMR_MR_VIRT_ADDR (1ULL << 4)
#define HMR_MR_ALLOCATED (1ULL << 5)
#define HMR_MR_PROV_KEY (1ULL << 6)
#define HMR_MR_MMU_NOTIFY (1ULL << 7)
#define HMR_MR_RMA_EVENT (1ULL << 8)
#define HMR_MR_ENDPOINT (1ULL << 9)
#define HMR_MR_HMEM (1ULL << 10)
#define HMR_MR_COLLECTIVE (1ULL << 11)

/* Access bits (fi_mr(3)). */
#define HMR_COLLECTIVE (1ULL << 6)
#define HMR_READ (1ULL << 8)
#define HMR_WRITE (1ULL << 9)
#define HMR_RECV (1ULL << 10)
#define HMR_SEND (1ULL << 11)
#define HMR_REMOTE_READ (1ULL << 12)
#define HMR_REMOTE_WRITE (1ULL << 13)

/* Registration flags (fi_mr(3)). */
#define HMR_MR_DMABUF (1ULL << 40)        /* attr->dmabuf describes the memory, not mr_iov */
/* The caller gives its peers the address hmr reports for the MR's first byte (hmr_mr_raw_attr's
 * base_addr, or a packed rkey), not 0: on a domain without HMR_MR_VIRT_ADDR the MR may then share
 * a cached registration that begins before it (a sub-range of a registered buffer is a cache hit),
 * and its first byte is at that offset.  With HMR_MR_VIRT_ADDR it changes nothing.  hmr's own
 * flag, not libfabric's. */
#define HMR_MR_REPORTED_BASE (1ULL << 43)
#define HMR_HMEM_HOST_ALLOC (1ULL << 45)  /* device-runtime host allocation */
#define HMR_HMEM_DEVICE_ONLY (1ULL << 46) /* the CPU must never touch this memory */
#define HMR_RMA_PMEM (1ULL << 49)
#define HMR_RMA_EVENT (1ULL << 56) /* MR may be bound to counters for remote events */
#define HMR_AUTH_KEY (1ULL << 57)
/* Flag for hmr_domain_bind(): registrations complete through the event queue. */
#define HMR_REG_MR (1ULL << 59)

/* Returned by hmr_mr_key() when no 64-bit key is available (RAW domains, pending MRs). */
#define HMR_KEY_NOTAVAIL ((uint64_t)-1)

enum hmr_hmem_iface {
	HMR_HMEM_SYSTEM = 0,
	HMR_HMEM_CUDA = 1,
	HMR_HMEM_ROCR = 2,
	HMR_HMEM_ZE = 3,
	HMR_HMEM_NEURON = 4,
	HMR_HMEM_SYNAPSEAI = 5,
};
#define HMR_HMEM_IFACE_COUNT 6

enum hmr_threading {
	HMR_THREAD_UNSPEC = 0,
	HMR_THREAD_SAFE = 1,
	HMR_THREAD_FID = 2,
	HMR_THREAD_DOMAIN = 3,
	HMR_THREAD_COMPLETION = 4,
	HMR_THREAD_ENDPOINT = 5,
};

/* Level Zero device identifier as libfabric's fi_hmem_ze_device(): driver << 16 | device.
 * Returns -HMR_EINVAL if either index is negative or above 0x7fff (driver) / 0xffff (device). */
HMR_API int hmr_hmem_ze_device(int driver_index, int device_index);
/* Inverse of hmr_hmem_ze_device(); both outputs written only on success. */
HMR_API int hmr_hmem_ze_device_decode(int device, int *driver_index, int *device_index);

/* ---------------------------------------------------------------- objects --------------- */
typedef struct hmr_domain hmr_domain;
typedef struct hmr_mr hmr_mr;
typedef struct hmr_eq hmr_eq;
typedef struct hmr_cntr hmr_cntr;
typedef struct hmr_ep hmr_ep;
/* Any of the objects above, for hmr_mr_bind() and hmr_domain_bind(). */
typedef struct hmr_fid hmr_fid;
static inline hmr_fid *hmr_ep_fid(hmr_ep *ep) { return (hmr_fid *)(void *)ep; }
static inline hmr_fid *hmr_cntr_fid(hmr_cntr *cntr) { return (hmr_fid *)(void *)cntr; }
static inline hmr_fid *hmr_eq_fid(hmr_eq *eq) { return (hmr_fid *)(void *)eq; }

/* ---------------------------------------------------------------- domain ---------------- */
struct hmr_domain_attr {
	size_t size; /* sizeof(struct hmr_domain_attr) */
	/* NIC adapter: "sim" (software NIC in this process; the default when NULL), "verbs"
	 * (an RDMA device through rdma-core's libibverbs.so.1, loaded at run time), "ofi"
	 * (a libfabric provider through libfabric.so.1, loaded at run time) or "callback"
	 * (your own functions, struct hmr_nic_callbacks as nic_handle). */
	const char *nic;
	/* Adapter options, "name=value" pairs separated by ';'.  sim understands
	 * require=<mode bit names joined by '|'> (the mr_mode the simulated NIC requires),
	 * key_size=<1..8, or 16 with raw>, max_mr_size=<bytes>, iov_limit=<n>, mr_cnt=<n>,
	 * dmabuf=0|1 (imports dma-bufs; default 1), peer_direct=0|1 (registers device
	 * addresses, as with nvidia-peermem; default 0), pins=0|1 (registrations pin host pages
	 * and count against RLIMIT_MEMLOCK; default 0), max_pinned=<bytes> (the NIC holds at most
	 * that many pinned bytes and refuses more with -HMR_ENOMEM; implies pins=1).
	 * verbs understands device=<name>, odp=on|off, relaxed_ordering=auto|on|off,
	 * raw_keys=on|off (see docs/api.md).  ofi understands provider=<name as libfabric
	 * prints it, e.g. tcp;ofi_rxm>, ep_type=rdm|msg|dgram, domain=<name>, fabric=<name>,
	 * mr_mode=<names or number>, hmem=1|0 (see docs/api.md). */
	const char *nic_options;
	/* In: the mr_mode bits the application supports (BASIC/SCALABLE accepted).
	 * Out: the bits the application must honour; hmr clears those it emulates
	 * (LOCAL and HMEM).  A bit the NIC needs and the application lacks fails with
	 * -HMR_ENODATA and says which. */
	uint64_t mr_mode;
	/* In: 0 for the NIC's size, or a smaller size in bytes (for keys you request: refused
	 * with -HMR_EINVAL under HMR_MR_PROV_KEY).  Out: the key size in use; every key of the
	 * domain is carried at it (raw keys, packed keys). */
	size_t mr_key_size;
	/* In: 0 for the NIC's limit, or a smaller limit.  Out: the limit in force. */
	size_t mr_iov_limit;
	/* In: 0 for the NIC's limit, or a smaller one.  Out: most MRs open at once. */
	size_t mr_cnt;
	/* In: the threading model the application wants (UNSPEC = SAFE).  Out: provided. */
	enum hmr_threading threading;
	/* Registration cache of this domain.  In: 0 takes the process default
	 * (FI_MR_CACHE_MAX_COUNT, else 1024 regions; FI_MR_CACHE_MAX_SIZE, else physical memory
	 * divided by the number of CPUs).  Out: the limits in force, 0 when caching is off. */
	size_t cache_max_count;
	size_t cache_max_size;
	/* In: "memhooks", "userfaultfd", "disabled" (no caching), "default" or the name of a
	 * monitor imported with hmr_monitor_import; NULL takes FI_MR_CACHE_MONITOR, else
	 * "default": memhooks where it installs, else userfaultfd, else no host cache (with a
	 * warning).  A monitor named here that cannot start fails hmr_domain_open.
	 * Out: the monitor in use ("disabled" when caching is off).  Only registrations whose
	 * peer-visible form can be shared are cached: provider keys (HMR_MR_PROV_KEY), one
	 * segment, no RMA_EVENT flag, no MR_ENDPOINT domain, no caller dma-buf.  Device memory
	 * (host shadows too) is cached under its runtime's monitor (see docs/semantics.md). */
	const char *cache_monitor;
	/* The application's own NIC object for hmr to register in, or NULL for one the adapter
	 * opens itself.  "verbs": a struct ibv_pd * (hmr registers in that PD and never frees it;
	 * it must outlive the domain).  "ofi": a struct fid_domain * (never closed by hmr; it
	 * must outlive the domain; nic_options must then say provider= and mr_mode=, the
	 * domain's info->fabric_attr->prov_name and info->domain_attr->mr_mode).
	 * "callback": a struct hmr_nic_callbacks * (required).
	 * Out: the NIC object registrations are made on (ofi: the struct fid_domain *, verbs:
	 * the struct ibv_pd *, callback: the callbacks), also when the adapter opened it itself;
	 * that one stays hmr's and closes with the hmr domain. */
	void *nic_handle;
	/* In: HMR_DOMAIN_* flags; other bits fail with -HMR_EBADFLAGS.  Out: those in force. */
	uint64_t flags;
};
/* ---------------------------------------------------------------- a NIC of your own ---- */
/* nic = "callback": hmr decides what the memory is, how it may reach the NIC, caches and
 * watches it, and calls these functions for the NIC work, which stays the application's
 * (its own verbs PD, provider domain, ...).  Pass the struct as hmr_domain_attr.nic_handle;
 * it is read once at open (the functions and context must stay valid while the domain is
 * open).  hmr never calls back while holding one of its locks, so a callback may call hmr.
 * A callback returns 0, or a negative HMR_E* code and may write a reason (NUL-terminated,
 * at most reason_size bytes) that hmr_last_error() then repeats. */
struct hmr_nic_reg_request {
	const void *addr;           /* the range: a host VA (or a device VA with peer-direct) */
	size_t len;
	uint64_t access;            /* HMR_* access bits */
	enum hmr_hmem_iface iface;  /* what the memory is (hmr detected or verified it) */
	uint64_t device;
	int dmabuf_fd;              /* reg_dmabuf: the dma-buf (hmr's or the caller's; never close
	                             * it), the range's offset in it; reg_va: -1 and 0 */
	uint64_t dmabuf_offset;
	int has_requested_key;      /* 1 without HMR_MR_PROV_KEY: the application chose the key */
	uint64_t requested_key;
	int on_demand_paging;       /* 1: HMR_MR_ODP (only with HMR_NIC_CB_ODP); addr NULL and len
	                             * SIZE_MAX: the whole address space (HMR_NIC_CB_IMPLICIT_ODP) */
};
/* What an hmr_mr_rereg asks of the rereg callback; unchanged parts are NULL / 0. */
struct hmr_nic_rereg_request {
	const void *addr;  /* the new range, or NULL (and len 0) to keep it */
	size_t len;
	int has_access;    /* 1: access is the new HMR_* access */
	uint64_t access;
	void *nic_pd;      /* HMR_MR_REREG_PD: your protection domain to move to, or NULL */
};
struct hmr_nic_mr {
	void *handle;   /* yours: hmr hands it back to dereg */
	void *desc;     /* hmr_mr_desc() of MRs on this registration */
	uint64_t key;   /* hmr_mr_key(); must fit in key_size bytes */
};
#define HMR_NIC_CB_DMABUF (1ULL << 0)      /* reg_dmabuf imports dma-bufs */
#define HMR_NIC_CB_PEER_DIRECT (1ULL << 1) /* reg_va takes device VAs (nvidia-peermem and the like) */
#define HMR_NIC_CB_ODP (1ULL << 2)          /* reg_va makes on-demand-paging registrations */
#define HMR_NIC_CB_IMPLICIT_ODP (1ULL << 3) /* ... also of the whole address space */
/* reg_va of host memory pins its pages (as a kernel RDMA driver does): hmr counts the bytes
 * against RLIMIT_MEMLOCK (unless the process has CAP_IPC_LOCK) and gives back idle cached
 * registrations before passing it (docs/semantics.md, "Under pressure"). */
#define HMR_NIC_CB_PINS_HOST_MEMORY (1ULL << 4)
struct hmr_nic_callbacks {
	size_t size;                /* sizeof(struct hmr_nic_callbacks) */
	void *context;              /* passed to every callback */
	size_t key_size;            /* 1..8: bytes of the keys reg_* return */
	uint64_t required_mr_mode;  /* mr_mode bits your NIC cannot work without */
	uint64_t max_mr_size;       /* 0: no limit */
	size_t mr_cnt;              /* most registrations at once; 0: no limit */
	uint64_t caps;              /* HMR_NIC_CB_* */
	int (*reg_va)(void *context, const struct hmr_nic_reg_request *request,
		      struct hmr_nic_mr *mr, char *reason, size_t reason_size);
	/* With HMR_NIC_CB_DMABUF; otherwise NULL. */
	int (*reg_dmabuf)(void *context, const struct hmr_nic_reg_request *request,
			  struct hmr_nic_mr *mr, char *reason, size_t reason_size);
	int (*dereg)(void *context, const struct hmr_nic_mr *mr, char *reason, size_t reason_size);
	/* Optional (NULL: hmr_mr_rereg fails with -HMR_ENOSYS).  Changes the registration in place
	 * and may write a new desc and key to *mr.  After a failure hmr only deregisters it. */
	int (*rereg)(void *context, struct hmr_nic_mr *mr, const struct hmr_nic_rereg_request *request,
		     char *reason, size_t reason_size);
	/* Optional, with HMR_NIC_CB_ODP (NULL: hmr_mem_advise does not prefetch, -HMR_ENOSYS):
	 * map [addr, addr + len) of an ODP registration now; write: 1 when it will be written. */
	int (*advise)(void *context, const struct hmr_nic_mr *mr, const void *addr, size_t len,
		      int write, char *reason, size_t reason_size);
};

/* Device memory the NIC cannot reach directly (FI_HMEM_DISABLE_P2P, or neither a dma-buf nor
 * a peer-direct path) may be registered through a host shadow: a host buffer hmr owns, which
 * the NIC registers instead; hmr_mr_sync() copies between it and the device memory.  Without
 * this flag such a registration fails, naming each path and why it was not possible. */
#define HMR_DOMAIN_ALLOW_HMEM_COPY (1ULL << 0)

/* After fork() a child cannot use any object its parent made (domains and everything opened
 * on them): each call with one fails with -HMR_EBADF, and its close succeeds, touching only
 * the child's copy.  A child opens domains of its own. */
HMR_API int hmr_domain_open(struct hmr_domain_attr *attr, hmr_domain **domain);
/* -HMR_EBUSY while anything opened on the domain is still open: MRs, memory windows
 * (hmr_mw_alloc), unpacked remote keys (hmr_rkey_unpack), endpoints or counters; close those
 * first (hmr_last_error() gives the counts); the domain stays open and usable.  Close what
 * you opened on a libfabric domain hmr opened for you (nic_handle: endpoints, CQs, AVs) before
 * the hmr domain: libfabric refuses to close a domain under them, and hmr_domain_close then
 * closes the hmr domain but says -HMR_EIO, leaving libfabric's domain open.  The same with
 * QPs, MRs or windows left on a verbs PD hmr allocated: -HMR_EIO, the device closed all the
 * same (which destroys them).
 * Of every close: -HMR_EBUSY means nothing was closed (the handle is still yours); other
 * failures say what went wrong while the object went all the same (a bad handle aside),
 * except hmr_mw_close's, whose window stays open when the NIC refuses to free it;
 * hmr_rkey_release frees the key whatever it returns.  A freed handle's storage may hold the
 * next object made: never close it again. */
HMR_API int hmr_domain_close(hmr_domain *domain);
/* Binds an event queue; with HMR_REG_MR every registration completes asynchronously on it. */
HMR_API int hmr_domain_bind(hmr_domain *domain, hmr_fid *eq, uint64_t flags);

struct hmr_domain_stats {
	size_t size;                 /* sizeof(struct hmr_domain_stats) */
	uint64_t mr_open;            /* MR handles open now */
	uint64_t mr_bytes;           /* bytes covered by open MR handles */
	uint64_t registrations;      /* successful registrations since open */
	uint64_t registration_errors;
	uint64_t nic_registrations;   /* registrations made on the NIC */
	uint64_t nic_deregistrations;
	uint64_t registration_ns;     /* total time spent registering on the NIC */
	uint64_t rma_ops;             /* RMA operations carried out through endpoints */
	uint64_t rma_bytes;
	uint64_t rma_errors;
	/* Registration cache. */
	uint64_t cache_hits;
	uint64_t cache_misses;
	uint64_t cache_invalidations; /* entries dropped because their memory changed */
	uint64_t cache_evictions;     /* unused entries dropped for the limits */
	uint64_t cache_uncached;      /* cacheable registrations handed out uncached (limits, races) */
	uint64_t cache_regions;       /* entries cached now */
	uint64_t cache_bytes;
	uint64_t cache_in_use;        /* cached entries some MR holds */
	/* Added after the fields above: a caller built with the shorter struct (size up to
	 * cache_in_use) is still accepted and filled up to its size. */
	uint64_t deregistration_ns;   /* total time spent deregistering on the NIC */
	/* Added after deregistration_ns: when the NIC refuses a registration for resources
	 * (ENOSPC, ENOMEM, EAGAIN), hmr gives back unused cached registrations and tries again
	 * (docs/semantics.md, "Under pressure"). */
	uint64_t cache_pressure_evictions; /* unused cached registrations given back for that */
	uint64_t nic_refusal_retries;      /* registrations tried again after such a refusal */
	uint64_t nic_refusals;             /* such refusals passed to the caller: nothing was idle */
	/* Added after nic_refusals: what hmr holds at the NIC now, counted against the bounds
	 * hmr_md_query reports (max_registrations, max_pinned_bytes). */
	uint64_t nic_registrations_held;   /* NIC registrations: open MRs' and idle cached ones */
	uint64_t nic_pinned_bytes;         /* host bytes they pin (0 on a NIC that pins nothing) */
};
/* Deregisters every cached registration no MR holds. */
HMR_API int hmr_domain_cache_flush(hmr_domain *domain);

/* ---------------------------------------------------------------- custom monitors ------- */
/* A cache monitor supplied by the application (libfabric's "mr_cache" import): hmr calls
 * these operations; the application calls hmr_monitor_notify() when memory changes. */
typedef struct hmr_monitor hmr_monitor;
struct hmr_monitor_ops {
	size_t size;      /* sizeof(struct hmr_monitor_ops) */
	const char *name; /* what domains name in hmr_domain_attr.cache_monitor */
	void *context;    /* passed to every operation */
	int (*start)(void *context);   /* 0 or a negative HMR_E* code */
	void (*stop)(void *context);
	int (*subscribe)(void *context, const void *addr, size_t len);
	void (*unsubscribe)(void *context, const void *addr, size_t len);
	/* Optional (NULL: always valid): asked on every cache hit; 0 means the range changed. */
	int (*valid)(void *context, const void *addr, size_t len);
};
HMR_API int hmr_monitor_import(const struct hmr_monitor_ops *ops, hmr_monitor **monitor);
/* Every cached registration overlapping [addr, addr+len) is dropped before this returns.
 * Call it after the change (before the call that made it returns to its caller), from an
 * ordinary thread: idle registrations of the range are deregistered on the NIC before it
 * returns, so not from inside a memory hook that holds the allocator's lock, nor from a
 * signal handler. */
HMR_API int hmr_monitor_notify(hmr_monitor *monitor, const void *addr, size_t len);
/* -HMR_EBUSY while a domain uses it. */
HMR_API int hmr_monitor_close(hmr_monitor *monitor);
HMR_API int hmr_domain_query_stats(hmr_domain *domain, struct hmr_domain_stats *stats);

/* ---------------------------------------------------------------- memory domain (UCX md_query) */
/* A set of memory interfaces: bit (1 << iface) for each enum hmr_hmem_iface. */
#define HMR_HMEM_IFACE_BIT(iface) (1ULL << (iface))
/* What hmr_md_query computes beyond the always-filled fields (field_mask, in). */
#define HMR_MD_ATTR_REG_COST (1ULL << 0) /* reg_cost; the first query of a domain may measure it */
/* hmr_md_attr.flags */
#define HMR_MD_FLAG_CACHE (1ULL << 0)          /* host registrations are cached */
#define HMR_MD_FLAG_DMABUF (1ULL << 1)         /* the NIC imports dma-bufs */
#define HMR_MD_FLAG_PEER_DIRECT (1ULL << 2)    /* the NIC registers device addresses directly */
#define HMR_MD_FLAG_ODP (1ULL << 3)            /* HMR_MR_ODP registrations are possible */
#define HMR_MD_FLAG_RAW_KEYS (1ULL << 4)       /* keys are raw bytes (HMR_MR_RAW) */
#define HMR_MD_FLAG_MEMORY_WINDOWS (1ULL << 5) /* hmr_mw_* work */
#define HMR_MD_FLAG_ODP_ALWAYS (1ULL << 6)     /* every registration is ODP (verbs odp=on) */
#define HMR_MD_FLAG_IMPLICIT_ODP (1ULL << 7)   /* HMR_MR_ODP over the whole address space */
#define HMR_MD_FLAG_ADVISE (1ULL << 8)         /* hmr_mem_advise prefetches ODP MRs */
#define HMR_MD_FLAG_REREG (1ULL << 9)          /* hmr_mr_rereg works */
#define HMR_MD_FLAG_INDIRECT (1ULL << 10)      /* hmr_mr_reg_indirect works */
/* Your own data transfers on this NIC (verbs work requests, libfabric calls on its domain)
 * need a descriptor for each local buffer: pass hmr_mr_desc of an MR covering it.  The NIC
 * requires MR_LOCAL; hmr clears HMR_MR_LOCAL from the domain's mode because it registers what
 * its own endpoints use, but it does not move your bytes. */
#define HMR_MD_FLAG_LOCAL_DESCRIPTORS (1ULL << 11)
/* Registration time as a linear function of size: overhead_ns + ns_per_byte * len. */
struct hmr_linear_cost {
	double overhead_ns;
	double ns_per_byte;
};
struct hmr_md_attr {
	size_t size;          /* sizeof(struct hmr_md_attr) */
	uint64_t field_mask;  /* in: HMR_MD_ATTR_* bits; other bits fail with -HMR_EBADFLAGS */
	uint64_t flags;       /* HMR_MD_FLAG_* */
	uint64_t max_reg;     /* most bytes one registration may cover */
	size_t key_size;      /* bytes of a remote key (the negotiated mr_key_size) */
	size_t rkey_packed_size; /* bytes hmr_rkey_pack writes for an MR of this domain */
	uint64_t reg_mem_types;    /* HMR_HMEM_IFACE_BIT set: memory this domain can register */
	uint64_t detect_mem_types; /* memory hmr_detect_memory_type recognises */
	uint64_t alloc_mem_types;  /* memory hmr_mem_alloc can allocate */
	/* HMR_MD_ATTR_REG_COST: the NIC's own figure when it has one (reg_cost_measured 0);
	 * otherwise measured once per domain on its first such query, by registering 64 KiB and
	 * 4 MiB host buffers directly on the NIC a few times each (reg_cost_measured 1). */
	struct hmr_linear_cost reg_cost;
	int reg_cost_measured;
	/* Added after reg_cost_measured (a caller built with the shorter struct is still served):
	 * the most registrations hmr holds at the NIC at once, idle cached ones included, and
	 * where that bound comes from: "nic" (the NIC's own limit: verbs max_mr, libfabric
	 * mr_cnt of a provider registering through a kernel driver, the callback's mr_cnt,
	 * sim's mr_cnt option), "application" (a smaller
	 * hmr_domain_attr.mr_cnt), or "none" (0: the NIC states no limit; hmr then learns it from
	 * refusals).  docs/semantics.md, "Under pressure". */
	size_t max_registrations;
	const char *max_registrations_source;
	/* Added after max_registrations_source: the most host bytes hmr holds pinned at the NIC
	 * at once (page-rounded, idle cached registrations included; before passing it hmr gives
	 * back idle ones), and where that bound comes from: "nic" (the NIC's own, sim's
	 * max_pinned), "rlimit_memlock" (RLIMIT_MEMLOCK's soft limit, read at domain open: the
	 * kernel refuses pinning past it; 0 there is a bound of 0), "cap_ipc_lock" (0: the process may pin without limit),
	 * "unlimited" (0: RLIMIT_MEMLOCK is unlimited) or "not_pinned" (0: the NIC pins no host
	 * memory: ODP, software NICs, libfabric's tcp and shm). */
	uint64_t max_pinned_bytes;
	const char *max_pinned_bytes_source;
	/* Added after max_pinned_bytes_source: HMR_HMEM_IFACE_BIT sets of the loaded runtimes'
	 * device memory that reaches this NIC without a host shadow, on every device of the
	 * runtime, by each path.  dmabuf_mem_types: hmr exports it as a dma-buf and the NIC
	 * imports that (the device can export, e.g. CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; the
	 * NIC imports dma-bufs; FI_HMEM_<VENDOR>_USE_DMABUF is not 0; FI_HMEM_DISABLE_P2P is
	 * not set).  peer_direct_mem_types: the NIC registers its device addresses (nvidia-peermem
	 * and the device's GPUDirect RDMA support; P2P not disabled).  Memory in neither takes a
	 * host shadow (HMR_DOMAIN_ALLOW_HMEM_COPY) or fails to register: what a GPU-direct
	 * transport tells its caller (the NCCL plugin's NCCL_PTR_CUDA). */
	uint64_t dmabuf_mem_types;
	uint64_t peer_direct_mem_types;
};
/* What the domain can register and what a registration costs (UCX md_query). */
HMR_API int hmr_md_query(hmr_domain *domain, struct hmr_md_attr *attr);

/* ---------------------------------------------------------------- memory regions -------- */
struct hmr_mr_dmabuf {
	int fd;             /* the caller keeps ownership; hmr never closes it */
	uint64_t offset;    /* of the registered range inside the dma-buf */
	size_t len;
	void *base_addr;    /* the address the range is known by (VIRT_ADDR addressing) */
};

struct hmr_mr_attr {
	size_t size; /* sizeof(struct hmr_mr_attr) */
	const struct iovec *mr_iov;   /* unless flags has HMR_MR_DMABUF */
	size_t iov_count;
	const struct hmr_mr_dmabuf *dmabuf; /* with HMR_MR_DMABUF */
	uint64_t access;
	uint64_t offset;        /* reserved by fi_mr(3): must be 0 */
	uint64_t requested_key; /* ignored when the domain requires HMR_MR_PROV_KEY */
	void *context;
	size_t auth_key_size;
	const uint8_t *auth_key;
	enum hmr_hmem_iface iface;
	union {
		uint64_t reserved;
		int cuda;
		int rocr;
		int ze; /* hmr_hmem_ze_device() encoding */
		int neuron;
		int synapseai;
	} device;
	void *hmem_data;  /* passed to the NIC adapter untouched */
	size_t page_size; /* 0, or a power of two >= 4096 the NIC should map with */
};

HMR_API int hmr_mr_reg(hmr_domain *domain, const void *buf, size_t len, uint64_t access,
		       uint64_t offset, uint64_t requested_key, uint64_t flags, hmr_mr **mr,
		       void *context);
HMR_API int hmr_mr_regv(hmr_domain *domain, const struct iovec *iov, size_t count,
			uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags,
			hmr_mr **mr, void *context);
HMR_API int hmr_mr_regattr(hmr_domain *domain, const struct hmr_mr_attr *attr, uint64_t flags,
			   hmr_mr **mr);
/* Deregisters and frees the MR, releasing its bindings to counters and endpoints.  A pending
 * asynchronous registration is waited for first, and an unread completion event for the MR
 * is withdrawn from the event queue, so no event ever names a closed MR. */
HMR_API int hmr_mr_close(hmr_mr *mr);
/* Local descriptor for data transfers; NULL for an invalid or pending MR.  On the "verbs"
 * NIC it points to a struct hmr_verbs_desc. */
HMR_API void *hmr_mr_desc(hmr_mr *mr);

/* What hmr_mr_desc() points to on the "verbs" NIC, valid while the MR is open.  A range longer
 * than the device's max_mr_size is registered in chunks of chunk_len bytes (a power of two):
 * chunk i covers [start + i * chunk_len, start + (i + 1) * chunk_len) of the registered range and
 * its lkey/rkey are chunks[i]->lkey/rkey.  A work request's buffer must lie within one chunk. */
struct ibv_mr;
struct hmr_verbs_desc {
	struct ibv_mr *mr;             /* the first (usually only) chunk */
	size_t chunk_count;
	uint64_t chunk_len;
	struct ibv_mr *const *chunks;  /* chunk_count entries */
};
/* 64-bit remote key; HMR_KEY_NOTAVAIL for RAW domains, pending or invalid MRs. */
HMR_API uint64_t hmr_mr_key(hmr_mr *mr);
/* Raw key bytes and the base address a peer must use.  On entry *key_size is the size of
 * raw_key; -HMR_ETOOSMALL writes the needed size to *key_size.  flags must be 0. */
HMR_API int hmr_mr_raw_attr(hmr_mr *mr, uint64_t *base_addr, uint8_t *raw_key, size_t *key_size,
			    uint64_t flags);
/* Turns a peer's raw key into a 64-bit key for this domain's data transfers. */
HMR_API int hmr_mr_map_raw(hmr_domain *domain, uint64_t base_addr, const uint8_t *raw_key,
			   size_t key_size, uint64_t *key, uint64_t flags);
HMR_API int hmr_mr_unmap_key(hmr_domain *domain, uint64_t key);
/* Binds an endpoint (flags 0) or a counter (HMR_REMOTE_WRITE and/or HMR_REMOTE_READ). */
HMR_API int hmr_mr_bind(hmr_mr *mr, hmr_fid *bfid, uint64_t flags);
HMR_API int hmr_mr_enable(hmr_mr *mr);
/* Tells hmr that the pages behind [iov] changed (HMR_MR_MMU_NOTIFY domains). */
HMR_API int hmr_mr_refresh(hmr_mr *mr, const struct iovec *iov, size_t count, uint64_t flags);

/* How an MR's memory reached the NIC (hmr chose it: see docs/semantics.md, "Device memory"). */
enum hmr_mr_path {
	HMR_MR_PATH_ADDRESS = 0,        /* host-reachable memory, registered by its address */
	HMR_MR_PATH_DMABUF = 1,         /* device memory exported by hmr as a dma-buf */
	HMR_MR_PATH_PEER_DIRECT = 2,    /* device memory registered by its device address */
	HMR_MR_PATH_HOST_SHADOW = 3,    /* a host buffer standing in for device memory */
	HMR_MR_PATH_CALLER_DMABUF = 4,  /* the caller's own dma-buf (HMR_MR_DMABUF) */
};
enum hmr_mem_kind {
	HMR_MEM_HOST = 0,        /* ordinary process memory */
	HMR_MEM_HOST_ALLOC = 1,  /* host memory allocated or pinned through a device runtime */
	HMR_MEM_DEVICE_ONLY = 2, /* device memory the CPU must never touch */
	HMR_MEM_MANAGED = 3,     /* migratable memory both the CPU and the device may touch */
};
struct hmr_mr_info {
	size_t size;                /* sizeof(struct hmr_mr_info) */
	enum hmr_hmem_iface iface;  /* what the memory is: detected, or declared and verified */
	enum hmr_mem_kind kind;
	uint64_t device;
	enum hmr_mr_path path;
	int cached;                 /* 1: the MR shares a cached NIC registration */
	/* HMR_MR_PATH_DMABUF: the fd the NIC imported and where the MR's first byte lies in it.
	 * The fd is hmr's (never close it), valid while the MR is open.  Otherwise -1 and 0. */
	int dmabuf_fd;
	uint64_t dmabuf_offset;
	/* HMR_MR_PATH_HOST_SHADOW: the shadow's address of the MR's first byte, which is what the
	 * NIC registered: use it as the local buffer of transfers (with hmr_mr_desc), and it is the
	 * address a VIRT_ADDR peer targets (hmr_mr_raw_attr's base).  Otherwise NULL. */
	void *shadow;
};
/* Describes a registered MR (-HMR_EAGAIN while an asynchronous registration is pending). */
HMR_API int hmr_mr_query(hmr_mr *mr, struct hmr_mr_info *info);

#define HMR_SYNC_TO_DEVICE (1ULL << 0)   /* shadow -> device: after the NIC wrote the shadow */
#define HMR_SYNC_FROM_DEVICE (1ULL << 1) /* device -> shadow: before the NIC reads the shadow */
/* Copies [offset, offset + len) of a host-shadow MR between the shadow and the device memory,
 * in the one direction flags names (len 0: to the end of the MR).  For every other MR the NIC
 * reaches the memory itself, and this checks its arguments and returns 0. */
HMR_API int hmr_mr_sync(hmr_mr *mr, uint64_t offset, size_t len, uint64_t flags);

/* ---------------------------------------------------------------- memory operations ----- */
/* The memory operations of verbs and UCX beyond registration (docs/semantics.md, "Memory
 * operations").  Each is available where the NIC has it (hmr_md_query_op says, with the
 * reason when not); elsewhere it fails with -HMR_ENOSYS and the reason. */

/* Access bit: memory windows may be bound to this MR (verbs' IBV_ACCESS_MW_BIND).  Such MRs are
 * never shared through the registration cache. */
#define HMR_MW_BIND (1ULL << 14)
/* Registration flag: on-demand paging (verbs' IBV_ACCESS_ON_DEMAND).  Nothing is pinned and
 * the pages need not exist yet (no HMR_MR_ALLOCATED check); the NIC resolves each page when it
 * reaches it and follows the process's page tables afterwards.  With one segment of address
 * NULL and length SIZE_MAX it is an implicit ODP registration of the whole address space
 * (HMR_MR_VIRT_ADDR domains only).  ODP MRs are never shared through the cache. */
#define HMR_MR_ODP (1ULL << 42)

/* Re-registration (verbs' ibv_rereg_mr): what hmr_mr_rereg changes. */
#define HMR_MR_REREG_TRANSLATION (1ULL << 0) /* attr->mr_iov, iov_count: the new range */
#define HMR_MR_REREG_ACCESS (1ULL << 1)      /* attr->access: the new access bits */
#define HMR_MR_REREG_PD (1ULL << 2)          /* attr->nic_pd: the NIC protection domain */
struct hmr_mr_rereg_attr {
	size_t size;                /* sizeof(struct hmr_mr_rereg_attr) */
	const struct iovec *mr_iov; /* HMR_MR_REREG_TRANSLATION */
	size_t iov_count;
	uint64_t access;            /* HMR_MR_REREG_ACCESS */
	void *nic_pd;               /* HMR_MR_REREG_PD: verbs: a struct ibv_pd * of the same device */
};
/* Changes the MR in place: its handle stays, its key and descriptor may change (read them
 * again).  An MR that shares a cached registration first gets one of its own, so nothing
 * another MR sees changes (a failure then leaves the MR as it was).  Errors in the arguments,
 * and inputs the NIC refuses, leave the MR as it was; when the NIC fails midway (verbs'
 * IBV_REREG_MR_ERR_CMD, any failure of a callback NIC's rereg), only hmr_mr_close is valid on
 * the MR afterwards (ibv_rereg_mr's rule).  -HMR_EBUSY while memory windows are bound to the MR or
 * indirect keys use it.  Other calls on the same MR must not run meanwhile. */
HMR_API int hmr_mr_rereg(hmr_mr *mr, uint64_t flags, const struct hmr_mr_rereg_attr *attr);

/* Memory windows (verbs' ibv_alloc_mw / ibv_bind_mw / IBV_WR_LOCAL_INV / ibv_dealloc_mw): a
 * key onto part of an MR registered with HMR_MW_BIND, which can be moved or revoked without
 * touching the MR.  Type 1: bound by a call, re-bindable at any time.  Type 2: bound by a work
 * request, must be invalidated before it is bound again.  Each bind gives a new key. */
typedef struct hmr_mw hmr_mw;
enum hmr_mw_type {
	HMR_MW_TYPE_1 = 1,
	HMR_MW_TYPE_2 = 2,
};
/* Where a window operation is posted.  verbs: the struct ibv_qp * (of the window's device) the
 * bind or invalidation goes to; its completion is the caller's to reap.  sim: pass NULL (the
 * operation completes before the call returns). */
struct hmr_mw_post {
	size_t size;      /* sizeof(struct hmr_mw_post) */
	void *queue;
	uint64_t wr_id;
	int unsignaled;   /* 1: post without a completion (IBV_SEND_SIGNALED off) */
};
HMR_API int hmr_mw_alloc(hmr_domain *domain, enum hmr_mw_type type, hmr_mw **mw);
/* Binds the window to [addr, addr + len) of `mr` (addresses of the MR's memory) with `access`
 * (HMR_REMOTE_READ and/or HMR_REMOTE_WRITE, which the MR must grant) and writes the window's
 * new key to *key.  A peer addresses the window's bytes as it addresses the MR's.  While bound,
 * the MR cannot be closed or re-registered (-HMR_EBUSY). */
HMR_API int hmr_mw_bind(hmr_mw *mw, hmr_mr *mr, const void *addr, size_t len, uint64_t access,
			const struct hmr_mw_post *post, uint64_t *key);
/* Revokes the window's key: RMA through it fails afterwards.  On verbs the bind and the
 * invalidation complete on the QP: hmr releases the MR when the call returns, so reap the
 * invalidation's completion before closing or re-registering the MR. */
HMR_API int hmr_mw_invalidate(hmr_mw *mw, const struct hmr_mw_post *post);
/* Frees the window (a bound window is unbound first). */
HMR_API int hmr_mw_close(hmr_mw *mw);

/* Advice on an MR's pages (UCX's uct_md_mem_advise). */
enum hmr_mem_advice {
	HMR_MADV_NORMAL = 0,   /* no particular expectation: nothing is done */
	HMR_MADV_WILLNEED = 1, /* the range will be accessed soon: an ODP MR has its pages mapped
	                        * for the NIC now (verbs' ibv_advise_mr PREFETCH / PREFETCH_WRITE) */
};
/* Advises on [addr, addr + len) of `mr` (inside it).  An MR that is not ODP is pinned already:
 * WILLNEED on it succeeds and does nothing, as in UCX. */
HMR_API int hmr_mem_advise(hmr_mr *mr, const void *addr, size_t len,
			   enum hmr_mem_advice advice);

/* Indirect keys (mlx5's UMR with a KLM list): one key over ranges of MRs already registered
 * in the domain, in the given order.  A peer addresses the indirect key's bytes from 0 (byte
 * 0 of the first segment) to the total length, whatever the domain's addressing; one RMA may
 * span segments.  While the key is open its MRs cannot be closed or re-registered
 * (-HMR_EBUSY).  Close it with hmr_mr_close. */
struct hmr_mr_segment {
	hmr_mr *mr;
	const void *addr; /* inside mr's memory */
	size_t len;
};
HMR_API int hmr_mr_reg_indirect(hmr_domain *domain, const struct hmr_mr_segment *segments,
				size_t count, uint64_t access, hmr_mr **mr);

/* Whether an operation is available in a domain, and why not (hmr_md_query's flags say the
 * same without the reason). */
enum hmr_md_op {
	HMR_MD_OP_REREG = 0,          /* hmr_mr_rereg */
	HMR_MD_OP_MEMORY_WINDOWS = 1, /* hmr_mw_* */
	HMR_MD_OP_ODP = 2,            /* HMR_MR_ODP registrations */
	HMR_MD_OP_IMPLICIT_ODP = 3,   /* HMR_MR_ODP over the whole address space */
	HMR_MD_OP_ADVISE = 4,         /* hmr_mem_advise prefetching */
	HMR_MD_OP_INDIRECT = 5,       /* hmr_mr_reg_indirect */
};
#define HMR_MD_OP_COUNT 6
/* Returns 1 when `op` is available, 0 when not (and then writes why to reason, at most
 * reason_size bytes, NUL-terminated; reason may be NULL), or a negative HMR_E* code. */
HMR_API int hmr_md_query_op(hmr_domain *domain, enum hmr_md_op op, char *reason,
			    size_t reason_size);

/* ---------------------------------------------------------------- packed remote keys ---- */
/* What a peer needs to reach an MR, as bytes to send it (UCX's mkey_pack / rkey_unpack): the
 * remote address of the MR's first byte, its length, its key (raw or 64-bit), what the memory
 * is, and which kind of NIC registered it.  The blob is versioned, length-checked and
 * checksummed; hmr_rkey_unpack checks every field against the unpacking domain and trusts
 * none (docs/semantics.md, "Packed remote keys"). */
typedef struct hmr_rkey hmr_rkey;
#define HMR_RKEY_PACKED_MAX 64 /* no packed key is longer (hmr_md_attr.rkey_packed_size: exact) */
#define HMR_RKEY_RAW_MAX 16    /* bytes of the longest raw key */
/* Writes the MR's packed key to buf.  On entry *len is the size of buf; -HMR_ETOOSMALL writes
 * the size needed to *len (the one output written on failure).  -HMR_EAGAIN while an
 * asynchronous registration is pending. */
HMR_API int hmr_rkey_pack(hmr_mr *mr, void *buf, size_t *len);
/* Checks a peer's packed key and makes an hmr_rkey for this domain's data transfers.  A blob
 * that is truncated, of another version, inconsistent, corrupted, or from another kind of NIC
 * (or another libfabric provider) fails with -HMR_EINVAL and says which field. */
HMR_API int hmr_rkey_unpack(hmr_domain *domain, const void *buf, size_t len, hmr_rkey **rkey);
struct hmr_rkey_info {
	size_t size;                /* sizeof(struct hmr_rkey_info) */
	uint64_t addr;              /* remote address of the MR's first byte (hmr_ep_write's addr) */
	uint64_t length;            /* bytes the MR covers from addr */
	uint64_t key;               /* the key for this domain's hmr_ep_* calls (HMR_MR_RAW keys
	                             * are mapped, as hmr_mr_map_raw does, until release) */
	enum hmr_hmem_iface iface;  /* what the remote memory is */
	uint64_t device;
	size_t raw_key_size;        /* the key as the peer's NIC gave it, for a transport's own */
	uint8_t raw_key[HMR_RKEY_RAW_MAX];
};
HMR_API int hmr_rkey_query(hmr_rkey *rkey, struct hmr_rkey_info *info);
/* Releases the rkey (and its mapped key).  A domain cannot close while it has rkeys. */
HMR_API int hmr_rkey_release(hmr_rkey *rkey);

/* ---------------------------------------------------------------- memory (UCX style) ---- */
/* What hmr_mem_query computes beyond the always-filled fields (field_mask, in). */
#define HMR_MEM_ATTR_SYS_DEV (1ULL << 0) /* sys_dev and numa_node (a system call for host memory) */
#define HMR_MEM_ATTR_DMABUF (1ULL << 1)  /* export the range: dmabuf_fd, dmabuf_offset */
struct hmr_mem_attr {
	size_t size;                /* sizeof(struct hmr_mem_attr) */
	uint64_t field_mask;        /* in: HMR_MEM_ATTR_* bits; other bits fail with -HMR_EBADFLAGS */
	enum hmr_hmem_iface iface;  /* out, always: the runtime that owns the memory */
	enum hmr_mem_kind kind;
	uint64_t device;            /* as hmr_mr_attr.device: CUDA ordinal, ZE encoding, ... */
	void *base;                 /* the whole allocation holding the range (host memory: */
	size_t alloc_len;           /*   the pages covering it, hmr knows no malloc blocks) */
	uint64_t alloc_id;          /* changes when the address is freed and reused; 0 for host */
	/* HMR_MEM_ATTR_SYS_DEV: where the memory sits: a PCI bus id ("0000:17:00.0") for device
	 * memory, "numa:<node>" for host memory; "" when unknown.  numa_node: the node of host
	 * memory, -1 otherwise or when unknown. */
	char sys_dev[32];
	int numa_node;
	/* HMR_MEM_ATTR_DMABUF: a new dma-buf of the range, owned by the caller (close it), and the
	 * offset of addr in it.  -1 and 0 otherwise. */
	int dmabuf_fd;
	uint64_t dmabuf_offset;
};
/* What [addr, addr + len) is, in one call (UCX mem_query).  The range must lie in one
 * allocation.  The CPU never touches the memory. */
HMR_API int hmr_mem_query(const void *addr, size_t len, struct hmr_mem_attr *attr);
/* The runtime and kind of [addr, addr + len) (UCX detect_memory_type). */
HMR_API int hmr_detect_memory_type(const void *addr, size_t len, enum hmr_hmem_iface *iface,
				   enum hmr_mem_kind *kind);
/* Allocates len bytes of `kind` memory of `iface` on `device` (UCX mem_alloc); HMR_HMEM_SYSTEM
 * gives page-aligned host memory (kind HMR_MEM_HOST, device 0).  Free with hmr_mem_free. */
HMR_API int hmr_mem_alloc(enum hmr_hmem_iface iface, uint64_t device, size_t len,
			  enum hmr_mem_kind kind, void **ptr);
/* Frees memory from hmr_mem_alloc, after dropping every cached registration of it in every
 * domain (so no cache ever hands out a registration of freed memory). */
HMR_API int hmr_mem_free(enum hmr_hmem_iface iface, void *ptr);
/* Drops every cached registration overlapping [addr, addr + len): in `domain`, or in every
 * domain when domain is NULL.  The explicit cache monitor of runtimes that report no frees
 * (Neuron, SynapseAI): call it before freeing such memory.  MRs already open keep their
 * registrations until closed. */
HMR_API int hmr_mem_invalidate(hmr_domain *domain, const void *addr, size_t len);

/* ---------------------------------------------------------------- event queue ----------- */
struct hmr_eq_attr {
	size_t size;    /* sizeof(struct hmr_eq_attr) */
	size_t entries; /* capacity hint; 0 for the default */
};
enum hmr_eq_event {
	HMR_MR_COMPLETE = 4, /* an asynchronous registration finished (FI_MR_COMPLETE) */
};
struct hmr_eq_entry {
	hmr_fid *fid;   /* the hmr_mr the event is about */
	void *context;  /* the context given at registration */
	uint64_t data;
};
struct hmr_eq_err_entry {
	hmr_fid *fid;
	void *context;
	uint64_t data;
	int err;            /* positive HMR_E* code */
	char reason[192];
};
HMR_API int hmr_eq_open(const struct hmr_eq_attr *attr, hmr_eq **eq);
/* -HMR_EBUSY while a domain is bound to it.  Threads waiting in hmr_eq_sread on it are woken
 * and return -HMR_EBADF before the queue goes (a reader thread may be stopped so). */
HMR_API int hmr_eq_close(hmr_eq *eq);
/* Returns 1 and fills the entry; -HMR_EAGAIN when empty; -HMR_EAVAIL when an error entry is
 * next (read it with hmr_eq_readerr). */
HMR_API int hmr_eq_read(hmr_eq *eq, uint32_t *event, struct hmr_eq_entry *entry, uint64_t flags);
/* As hmr_eq_read, waiting up to timeout_ms (any negative value: forever, as libfabric's
 * fi_eq_sread takes -1); -HMR_ETIMEDOUT when none came; -HMR_EBADF when the queue was closed
 * meanwhile. */
HMR_API int hmr_eq_sread(hmr_eq *eq, uint32_t *event, struct hmr_eq_entry *entry, int timeout_ms,
			 uint64_t flags);
/* Returns 1 and fills the entry; -HMR_EAGAIN when no error entry is next. */
HMR_API int hmr_eq_readerr(hmr_eq *eq, struct hmr_eq_err_entry *entry, uint64_t flags);

/* ---------------------------------------------------------------- counters -------------- */
struct hmr_cntr_attr {
	size_t size; /* sizeof(struct hmr_cntr_attr) */
	uint64_t flags; /* must be 0 */
};
HMR_API int hmr_cntr_open(hmr_domain *domain, const struct hmr_cntr_attr *attr, hmr_cntr **cntr);
/* -HMR_EBUSY while MRs are bound to it. */
HMR_API int hmr_cntr_close(hmr_cntr *cntr);
HMR_API int hmr_cntr_read(hmr_cntr *cntr, uint64_t *value);

/* ---------------------------------------------------------------- endpoints ------------- */
/* hmr's endpoints exist so MRs have something to bind to and so the software NIC can move
 * bytes; a transport with its own endpoints uses hmr only for registration. */
struct hmr_ep_attr {
	size_t size; /* sizeof(struct hmr_ep_attr) */
	uint64_t flags; /* must be 0 */
};
HMR_API int hmr_ep_open(hmr_domain *domain, const struct hmr_ep_attr *attr, hmr_ep **ep);
/* -HMR_EBUSY while MRs are bound to it; connections to and from it are dropped. */
HMR_API int hmr_ep_close(hmr_ep *ep);
/* Makes `peer` the target of ep's RMA operations (both must be on the same kind of NIC). */
HMR_API int hmr_ep_connect(hmr_ep *ep, hmr_ep *peer);
/* RMA write of [buf, buf+len) to the peer's memory at (addr, key).  desc is the local MR's
 * descriptor (required when the domain's mr_mode has HMR_MR_LOCAL, checked when given). */
HMR_API int hmr_ep_write(hmr_ep *ep, const void *buf, size_t len, void *desc, uint64_t addr,
			 uint64_t key);
HMR_API int hmr_ep_read(hmr_ep *ep, void *buf, size_t len, void *desc, uint64_t addr,
			uint64_t key);
/* Atomically adds `operand` to the 8-byte aligned uint64_t at (addr, key) and writes the
 * previous value to *result. Needs REMOTE_READ and REMOTE_WRITE at the target. */
HMR_API int hmr_ep_fetch_add(hmr_ep *ep, uint64_t operand, uint64_t *result, uint64_t addr,
			     uint64_t key);

#ifdef __cplusplus
}
#endif
#endif /* HMR_HMR_H */
