#include "plugin_under_test.h"

#include <dlfcn.h>
#include <hmr/hmr.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr::nccl::test {
namespace {

// The layouts NCCL compiles against (FACTS-vendor.md §6, x86-64), checked independently of the
// plugin's own declarations: a drifted header fails here, not in a rank.
static_assert(sizeof(ncclNetProperties_v8_t) == 64);
static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void*));
static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32);
static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64);
static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88);
static_assert(sizeof(ncclNetProperties_v9_t) == 104);
static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void*));
static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void*));
static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
static_assert(sizeof(ncclNetProperties_v11_t) == 112);
static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*));
static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void*));

template <typename P>
void copy_common(const P& p, Properties* out) {
  out->name = p.name != nullptr ? p.name : "";
  out->pci_path = p.pciPath != nullptr ? p.pciPath : "";
  out->guid = p.guid;
  out->ptr_support = p.ptrSupport;
  out->reg_is_global = p.regIsGlobal;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->max_comms = p.maxComms;
  out->max_recvs = p.maxRecvs;
  out->net_device_type = p.netDeviceType;
  if constexpr (requires { p.maxP2pBytes; }) {
    out->force_flush = p.forceFlush;
    out->max_p2p_bytes = p.maxP2pBytes;
    out->max_coll_bytes = p.maxCollBytes;
    out->vdevs = p.vProps.ndevs;
  }
  if constexpr (requires { p.maxMultiRequestSize; }) out->max_multi_request_size = p.maxMultiRequestSize;
}

// What every version shares; the version-specific members are filled by the subclasses.
template <typename Table, typename Props>
class NetBase : public Net {
 public:
  // `builtin`: one of NCCL's own transports' tables, not a plugin's.
  NetBase(const Table* t, int v, bool builtin = false) : t_(t), version_(v), builtin_(builtin) {}
  int version() const override { return version_; }
  const char* name() const override { return t_->name; }
  ncclResult_t devices(int* ndev) override { return t_->devices(ndev); }
  ncclResult_t properties(int dev, Properties* out) override {
    Props p;
    std::memset(&p, 0xa5, sizeof p);  // garbage in what the plugin does not fill
    const ncclResult_t rc = t_->getProperties(dev, &p);
    if (rc == ncclSuccess) copy_common(p, out);
    return rc;
  }
  // The plugin must say it has no device handle (NULL) even when handed garbage.  NCCL itself
  // passes a NULL one, and its own socket transport leaves it as it was, so a built-in table
  // gets NULL.
  ncclResult_t accept(void* listen_comm, void** comm) override {
    ncclNetDeviceHandle_t* dev_comm = builtin_ ? nullptr : reinterpret_cast<ncclNetDeviceHandle_t*>(0x1);
    const ncclResult_t rc = t_->accept(listen_comm, comm, &dev_comm);
    return rc == ncclSuccess && dev_comm != nullptr ? ncclInternalError : rc;
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) override {
    return t_->regMr(comm, data, size, type, mh);
  }
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                             int fd, void** mh) override {
    if (t_->regMrDmaBuf == nullptr) return ncclInternalError;  // optional: NULL in NCCL's Socket
    return t_->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
  }
  ncclResult_t dereg_mr(void* comm, void* mh) override { return t_->deregMr(comm, mh); }
  ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhs, void** request) override {
    return t_->iflush(comm, n, data, sizes, mhs, request);
  }
  ncclResult_t test(void* request, int* done, int* sizes) override { return t_->test(request, done, sizes); }
  ncclResult_t close_send(void* comm) override { return t_->closeSend(comm); }
  ncclResult_t close_recv(void* comm) override { return t_->closeRecv(comm); }
  ncclResult_t close_listen(void* comm) override { return t_->closeListen(comm); }

 protected:
  const Table* t_;
  int version_;
  bool builtin_;
};

class NetV8 final : public NetBase<ncclNet_v8_t, ncclNetProperties_v8_t> {
 public:
  using NetBase::NetBase;
  ncclResult_t init(ncclDebugLogger_t logger) override { return t_->init(logger); }
  ncclResult_t finalize() override { return ncclSuccess; }
  ncclResult_t listen(int dev, void* handle, void** comm) override { return t_->listen(dev, handle, comm); }
  ncclResult_t connect(int dev, void* handle, void** comm) override {
    ncclNetDeviceHandle_t* dev_comm = nullptr;
    return t_->connect(dev, handle, comm, &dev_comm);
  }
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** request) override {
    return t_->isend(comm, data, static_cast<int>(size), tag, mh, request);
  }
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** request) override {
    int narrow[NCCL_NET_MAX_REQUESTS];
    for (int i = 0; i < n && i < NCCL_NET_MAX_REQUESTS; ++i) narrow[i] = static_cast<int>(sizes[i]);
    return t_->irecv(comm, n, data, narrow, tags, mhs, request);
  }
};

class NetV9 final : public NetBase<ncclNet_v9_t, ncclNetProperties_v9_t> {
 public:
  using NetBase::NetBase;
  ncclResult_t init(ncclDebugLogger_t logger) override { return t_->init(logger); }
  ncclResult_t finalize() override { return ncclSuccess; }
  ncclResult_t listen(int dev, void* handle, void** comm) override { return t_->listen(dev, handle, comm); }
  ncclResult_t connect(int dev, void* handle, void** comm) override {
    ncclNetDeviceHandle_t* dev_comm = nullptr;
    return t_->connect(dev, handle, comm, &dev_comm);
  }
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** request) override {
    return t_->isend(comm, data, size, tag, mh, request);
  }
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** request) override {
    return t_->irecv(comm, n, data, sizes, tags, mhs, request);
  }
};

class NetV10 final : public NetBase<ncclNet_v10_t, ncclNetProperties_v10_t> {
 public:
  using NetBase::NetBase;
  ncclResult_t init(ncclDebugLogger_t logger) override { return t_->init(logger, nullptr); }
  ncclResult_t finalize() override { return ncclSuccess; }
  ncclResult_t listen(int dev, void* handle, void** comm) override { return t_->listen(dev, handle, comm); }
  ncclResult_t connect(int dev, void* handle, void** comm) override {
    ncclNetCommConfig_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclNetDeviceHandle_t* dev_comm = nullptr;
    return t_->connect(dev, &config, handle, comm, &dev_comm);
  }
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** request) override {
    return t_->isend(comm, data, size, tag, mh, nullptr, request);
  }
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** request) override {
    void* phandles[NCCL_NET_MAX_REQUESTS] = {};
    return t_->irecv(comm, n, data, sizes, tags, mhs, phandles, request);
  }
};

class NetV11 final : public NetBase<ncclNet_v11_t, ncclNetProperties_v11_t> {
 public:
  using NetBase::NetBase;
  ~NetV11() override {
    if (initialized_) t_->finalize(ctx_);
  }
  ncclResult_t init(ncclDebugLogger_t logger) override {
    ncclNetCommConfig_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    if (initialized_) return ncclSuccess;
    // (A flag, not ctx_: NCCL's socket transport initialises without setting a context.)
    const ncclResult_t rc = t_->init(&ctx_, 0x1234, &config, logger, nullptr);
    initialized_ = rc == ncclSuccess;
    // NCCL's own socket transport leaves setNetAttr NULL, and NCCL calls it only where set.
    if (rc == ncclSuccess && t_->setNetAttr != nullptr) {
      ncclNetAttr_v11_t attr;
      std::memset(&attr, 0xff, sizeof attr);  // -1: undefined, as NCCL passes it
      return t_->setNetAttr(ctx_, &attr);
    }
    return rc;
  }
  ncclResult_t finalize() override {
    void* ctx = ctx_;
    ctx_ = nullptr;
    initialized_ = false;
    return t_->finalize(ctx);
  }
  ncclResult_t listen(int dev, void* handle, void** comm) override {
    return t_->listen(ctx_, dev, handle, comm);
  }
  ncclResult_t connect(int dev, void* handle, void** comm) override {
    ncclNetDeviceHandle_t* dev_comm = nullptr;
    return t_->connect(ctx_, dev, handle, comm, &dev_comm);
  }
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** request) override {
    return t_->isend(comm, data, size, tag, mh, nullptr, request);
  }
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** request) override {
    void* phandles[NCCL_NET_MAX_REQUESTS] = {};
    return t_->irecv(comm, n, data, sizes, tags, mhs, phandles, request);
  }

 private:
  void* ctx_ = nullptr;
  bool initialized_ = false;
};

// NCCL refuses a table whose mandatory members are missing; so does the harness.
// (`optional_net_attr`: NCCL's built-in tables, which may leave setNetAttr NULL.)
template <typename Table>
bool complete(const Table* t, std::string* why, bool optional_net_attr = false) {
  bool ok = t->name != nullptr && t->init != nullptr && t->devices != nullptr &&
            t->getProperties != nullptr && t->listen != nullptr && t->connect != nullptr &&
            t->accept != nullptr && t->regMr != nullptr && t->deregMr != nullptr &&
            t->isend != nullptr && t->irecv != nullptr && t->iflush != nullptr &&
            t->test != nullptr && t->closeSend != nullptr && t->closeRecv != nullptr &&
            t->closeListen != nullptr;
  if constexpr (requires { t->finalize; }) {
    ok = ok && t->finalize != nullptr && (optional_net_attr || t->setNetAttr != nullptr);
  }
  if (!ok) *why = "a mandatory member of the table is NULL";
  return ok;
}

template <typename Table, typename Wrapper>
std::unique_ptr<Net> wrap(const void* symbol, int version, std::string* why, bool builtin = false) {
  const auto* t = static_cast<const Table*>(symbol);
  if (!complete(t, why, builtin)) return nullptr;
  return std::make_unique<Wrapper>(t, version, builtin);
}

}  // namespace

std::unique_ptr<PluginLibrary> PluginLibrary::open(const std::string& path, std::string* why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = "dlopen(" + path + "): " + (error != nullptr ? error : "unknown");
    return nullptr;
  }
  return std::unique_ptr<PluginLibrary>(new PluginLibrary(handle));
}

// Never dlclose'd here: the harness runs many scenarios on one load.  NCCL 2.28 does dlclose
// the plugin after its last communicator; unload_test.cpp covers that.
PluginLibrary::~PluginLibrary() = default;

std::unique_ptr<Net> PluginLibrary::table(int version, std::string* why) const {
  const std::string symbol = "ncclNetPlugin_v" + std::to_string(version);
  void* address = dlsym(handle_, symbol.c_str());
  if (address == nullptr) {
    *why = symbol + " is not exported";
    return nullptr;
  }
  switch (version) {
    case 8: return wrap<ncclNet_v8_t, NetV8>(address, version, why);
    case 9: return wrap<ncclNet_v9_t, NetV9>(address, version, why);
    case 10: return wrap<ncclNet_v10_t, NetV10>(address, version, why);
    case 11: return wrap<ncclNet_v11_t, NetV11>(address, version, why);
    default: *why = "no such ABI version"; return nullptr;
  }
}

int PluginLibrary::query_stats(int dev, hmr_domain_stats* stats) const {
  using QueryStats = int (*)(int, hmr_domain_stats*);
  auto query = reinterpret_cast<QueryStats>(dlsym(handle_, "hmr_nccl_net_query_stats"));
  if (query == nullptr) return -1;
  stats->size = sizeof *stats;
  return query(dev, stats);
}

std::unique_ptr<Net> wrap_v11_table(const void* table, std::string* why) {
  return wrap<ncclNet_v11_t, NetV11>(table, 11, why, /*builtin=*/true);
}

std::string plugin_path() {
  if (const char* path = std::getenv("HMR_NCCL_PLUGIN"); path != nullptr && *path != '\0') return path;
  return HMR_NCCL_PLUGIN_PATH;
}

const PluginLibrary& plugin_library_or_abort() {
  static std::unique_ptr<PluginLibrary> library = [] {
    std::string why;
    std::unique_ptr<PluginLibrary> opened = PluginLibrary::open(plugin_path(), &why);
    if (!opened) {
      std::fprintf(stderr, "%s\n", why.c_str());
      std::abort();
    }
    return opened;
  }();
  return *library;
}

std::unique_ptr<Net> plugin_table_or_abort(int version) {
  std::string why;
  std::unique_ptr<Net> net = plugin_library_or_abort().table(version, &why);
  if (!net) {
    std::fprintf(stderr, "ncclNetPlugin_v%d: %s\n", version, why.c_str());
    std::abort();
  }
  return net;
}

}  // namespace hmr::nccl::test
