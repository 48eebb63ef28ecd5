// A fake libfabric whose NICs carry 4 bytes of remote CQ data, as the verbs and EFA providers'
// do, made of the real libfabric's tcp and shm underneath.  This machine has no RDMA NIC, so
// the only way to run the NCCL plugin against what those providers offer is to take a real
// provider and give it their limit.  Loaded through the same path as the real library
// (HMR_OFI_LIBRARY): it exports the six functions hmr and the plugin resolve, and forwards
// them to libfabric.so.1 (or HMR_FAKE_IMM32_REAL), loaded privately.
//
// What it changes, and where each behaviour comes from:
// - fi_getinfo refuses hints asking for more than 4 bytes of CQ data with -FI_ENODATA, as
//   libfabric's ofi_check_domain_attr does for every provider ("cq_data_size" over the
//   provider's), and reports cq_data_size 4 in what it returns (verbs: sizeof(uint32_t), the
//   immediate data of an RDMA write or send; EFA: EFA_CQ_DATA_SIZE, 4).
// - Every operation that sends remote CQ data passes on its low 32 bits only, as the verbs
//   provider does (imm_data = htonl((uint32_t)data) in its writedata, writemsg, senddata,
//   sendmsg and inject paths): a user that puts more in loses it silently, as it would there.
// Everything else is the real provider's, untouched.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FAKE_CQ_DATA_SIZE 4

static struct {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const struct fi_info*,
                 struct fi_info**);
  void (*freeinfo)(struct fi_info*);
  struct fi_info* (*dupinfo)(const struct fi_info*);
  int (*fabric)(struct fi_fabric_attr*, struct fid_fabric**, void*);
  const char* (*strerror)(int);
  uint32_t (*version)(void);
} real;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static void load(void) {
  const char* path = getenv("HMR_FAKE_IMM32_REAL");
  void* library = dlopen(path != NULL && *path != '\0' ? path : "libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "fake_imm32_fabric: %s\n", dlerror());
    abort();  // a test harness misconfigured, not a condition to report
  }
  real.getinfo = (__typeof__(real.getinfo))dlsym(library, "fi_getinfo");
  real.freeinfo = (__typeof__(real.freeinfo))dlsym(library, "fi_freeinfo");
  real.dupinfo = (__typeof__(real.dupinfo))dlsym(library, "fi_dupinfo");
  real.fabric = (__typeof__(real.fabric))dlsym(library, "fi_fabric");
  real.strerror = (__typeof__(real.strerror))dlsym(library, "fi_strerror");
  real.version = (__typeof__(real.version))dlsym(library, "fi_version");
  if (!real.getinfo || !real.freeinfo || !real.dupinfo || !real.fabric || !real.strerror || !real.version) {
    fprintf(stderr, "fake_imm32_fabric: the real libfabric lacks a symbol\n");
    abort();
  }
}

// Each wrapped ops table starts with the copy the object points to, followed by the real
// provider's table, so a wrapper finds the original from the object alone.  One copy per
// object opened; the object's own close (its fid ops, wrapped too) frees them after the real
// close succeeded.
struct msg_ops {
  struct fi_ops_msg ops;
  const struct fi_ops_msg* real;
};
struct rma_ops {
  struct fi_ops_rma ops;
  const struct fi_ops_rma* real;
};
struct domain_ops {
  struct fi_ops_domain ops;
  const struct fi_ops_domain* real;
};
struct fabric_ops {
  struct fi_ops_fabric ops;
  const struct fi_ops_fabric* real;
};
// An object's fid ops, with what was made for it: freed when the object closes.
struct closing_ops {
  struct fi_ops ops;
  const struct fi_ops* real;
  void* made[2];
};

static int close_and_free(struct fid* fid) {
  struct closing_ops* wrap = (struct closing_ops*)fid->ops;
  const int rc = wrap->real->close(fid);
  if (rc == 0) {  // (the object is gone: only what was made for it is touched)
    free(wrap->made[0]);
    free(wrap->made[1]);
    free(wrap);
  }
  return rc;
}

// Makes `fid`'s close free `first` and `second` too; false (nothing changed) without memory.
static int free_at_close(struct fid* fid, void* first, void* second) {
  struct closing_ops* wrap = malloc(sizeof *wrap);
  if (wrap == NULL) return 0;
  wrap->ops = *fid->ops;
  wrap->real = fid->ops;
  wrap->ops.close = close_and_free;
  wrap->made[0] = first;
  wrap->made[1] = second;
  fid->ops = &wrap->ops;
  return 1;
}

static uint64_t imm32(uint64_t data) { return (uint32_t)data; }

static ssize_t msg_senddata(struct fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                            fi_addr_t dest, void* context) {
  return ((const struct msg_ops*)ep->msg)->real->senddata(ep, buf, len, desc, imm32(data), dest, context);
}
static ssize_t msg_sendmsg(struct fid_ep* ep, const struct fi_msg* msg, uint64_t flags) {
  struct fi_msg copy = *msg;
  copy.data = imm32(copy.data);
  return ((const struct msg_ops*)ep->msg)->real->sendmsg(ep, &copy, flags);
}
static ssize_t msg_injectdata(struct fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  return ((const struct msg_ops*)ep->msg)->real->injectdata(ep, buf, len, imm32(data), dest);
}
static ssize_t rma_writedata(struct fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                             fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
  return ((const struct rma_ops*)ep->rma)->real->writedata(ep, buf, len, desc, imm32(data), dest, addr, key,
                                                           context);
}
static ssize_t rma_writemsg(struct fid_ep* ep, const struct fi_msg_rma* msg, uint64_t flags) {
  struct fi_msg_rma copy = *msg;
  copy.data = imm32(copy.data);
  return ((const struct rma_ops*)ep->rma)->real->writemsg(ep, &copy, flags);
}
static ssize_t rma_injectdata(struct fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                              uint64_t addr, uint64_t key) {
  return ((const struct rma_ops*)ep->rma)->real->injectdata(ep, buf, len, imm32(data), dest, addr, key);
}

static int domain_endpoint(struct fid_domain* domain, struct fi_info* info, struct fid_ep** ep, void* context) {
  const int rc = ((const struct domain_ops*)domain->ops)->real->endpoint(domain, info, ep, context);
  if (rc != 0) return rc;
  struct msg_ops* msg = malloc(sizeof *msg);
  struct rma_ops* rma = malloc(sizeof *rma);
  if (msg == NULL || rma == NULL || !free_at_close(&(*ep)->fid, msg, rma)) {
    free(msg);
    free(rma);
    fi_close(&(*ep)->fid);
    return -FI_ENOMEM;
  }
  msg->ops = *(*ep)->msg;
  msg->real = (*ep)->msg;
  msg->ops.senddata = msg_senddata;
  msg->ops.sendmsg = msg_sendmsg;
  msg->ops.injectdata = msg_injectdata;
  (*ep)->msg = &msg->ops;
  rma->ops = *(*ep)->rma;
  rma->real = (*ep)->rma;
  rma->ops.writedata = rma_writedata;
  rma->ops.writemsg = rma_writemsg;
  rma->ops.injectdata = rma_injectdata;
  (*ep)->rma = &rma->ops;
  return 0;
}

static int fabric_domain(struct fid_fabric* fabric, struct fi_info* info, struct fid_domain** domain,
                         void* context) {
  const int rc = ((const struct fabric_ops*)fabric->ops)->real->domain(fabric, info, domain, context);
  if (rc != 0) return rc;
  struct domain_ops* ops = malloc(sizeof *ops);
  if (ops == NULL || !free_at_close(&(*domain)->fid, ops, NULL)) {
    free(ops);
    fi_close(&(*domain)->fid);
    return -FI_ENOMEM;
  }
  ops->ops = *(*domain)->ops;
  ops->real = (*domain)->ops;
  ops->ops.endpoint = domain_endpoint;
  (*domain)->ops = &ops->ops;
  return 0;
}

static void limit_cq_data(struct fi_info* info) {
  for (; info != NULL; info = info->next) {
    if (info->domain_attr != NULL && info->domain_attr->cq_data_size > FAKE_CQ_DATA_SIZE) {
      info->domain_attr->cq_data_size = FAKE_CQ_DATA_SIZE;
    }
  }
}

int fi_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
               const struct fi_info* hints, struct fi_info** info) {
  pthread_once(&loaded, load);
  if (hints != NULL && hints->domain_attr != NULL && hints->domain_attr->cq_data_size > FAKE_CQ_DATA_SIZE) {
    return -FI_ENODATA;
  }
  const int rc = real.getinfo(version, node, service, flags, hints, info);
  if (rc == 0) limit_cq_data(*info);
  return rc;
}

void fi_freeinfo(struct fi_info* info) {
  pthread_once(&loaded, load);
  real.freeinfo(info);
}

struct fi_info* fi_dupinfo(const struct fi_info* info) {
  pthread_once(&loaded, load);
  struct fi_info* copy = real.dupinfo(info);
  if (info != NULL) limit_cq_data(copy);  // (fi_dupinfo(NULL) makes empty hints)
  return copy;
}

int fi_fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) {
  pthread_once(&loaded, load);
  const int rc = real.fabric(attr, fabric, context);
  if (rc != 0) return rc;
  struct fabric_ops* ops = malloc(sizeof *ops);
  if (ops == NULL || !free_at_close(&(*fabric)->fid, ops, NULL)) {
    free(ops);
    fi_close(&(*fabric)->fid);
    return -FI_ENOMEM;
  }
  ops->ops = *(*fabric)->ops;
  ops->real = (*fabric)->ops;
  ops->ops.domain = fabric_domain;
  (*fabric)->ops = &ops->ops;
  return 0;
}

const char* fi_strerror(int errnum) {
  pthread_once(&loaded, load);
  return real.strerror(errnum);
}

uint32_t fi_version(void) {
  pthread_once(&loaded, load);
  return real.version();
}
