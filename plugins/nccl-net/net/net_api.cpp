#include "net_api.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../fabric/provider_nics.h"
#include "device.h"
#include "listen_comm.h"
#include "live_objects.h"
#include "log.h"
#include "memory_handle.h"
#include "recv_comm.h"
#include "send_comm.h"
#include "settings.h"

namespace hmr::nccl::api {
namespace {

struct Context {
  uint64_t comm_id = 0;
  // The communicator's ncclConfig_t.trafficClass: kept, not applied (docs/nccl-plugin.md, "not
  // supported"): comms share their device's endpoint, whatever their class.
  int traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
};

// Process-wide: the devices, and which comms and handles are alive.  Never destroyed, because
// NCCL may still call in while the process exits.
struct Plugin {
  std::mutex mutex;  // init, finalize, the connections in progress
  bool initialized = false;
  bool legacy = false;  // a v8-v10 init happened: the devices stay for the process
  size_t contexts = 0;
  std::vector<std::unique_ptr<Device>> devices;  // each keeps the settings read at init
  LiveObjects live_contexts, listen_comms, send_comms, recv_comms, mhandles;
  // Every request slot of every open send and recv comm.  test() is handed a bare pointer:
  // without this it read a closed comm's freed pool (a use after free) or whatever a foreign
  // pointer pointed to as a request (the audit of bad arguments found both); now it reads
  // nothing through a pointer that is not one of these.  Filled when a comm is handed to
  // NCCL and emptied before it is destroyed.
  LiveObjects requests;
  // Connections in progress, by the id written into NCCL's handle, each with the context
  // that started it (nullptr for v8-v10).  NCCL calls connect() until it returns a comm; one
  // it stops calling (an abort while connecting) ends with its context's finalize.
  struct Connecting {
    void* ctx = nullptr;
    std::unique_ptr<SendComm> comm;
  };
  std::unordered_map<uint64_t, Connecting> connecting;
  uint64_t next_connect_id = 1;
  // The open listen comms of v11 contexts, with their context.  NCCL may leave a listener
  // open (an abort while connecting, a failed accept), and a listener holds a port on its
  // device's shared endpoint, which then stays open with every peer address it keeps: the
  // context's finalize closes them.  (NCCL also closes listeners whose accept never returned
  // a comm, when connections share comms: close_listen takes those as any other.)
  std::unordered_map<void*, void*> listening;
};

Plugin& plugin() {
  static Plugin* instance = new Plugin;
  return *instance;
}

// Keeps the NICs HMR_NCCL_IFNAME accepts (unset: all but lo and docker, unless nothing else
// is left, as NCCL's socket transport falls back to them).  False and `why` when an explicit
// filter leaves none.
bool select_interfaces(const Settings& settings, std::vector<InfoPtr>* nics, std::string* why) {
  const InterfaceFilter filter =
      settings.interfaces.value_or(InterfaceFilter::exclude_loopback_and_docker());
  std::vector<InfoPtr> kept;
  std::string all;
  for (InfoPtr& info : *nics) {
    const std::string name = info->domain_attr->name;
    all += (all.empty() ? "" : ", ") + name;
    if (filter.accepts(name)) kept.push_back(std::move(info));
  }
  if (kept.empty() && settings.interfaces) {
    *why = "HMR_NCCL_IFNAME='" + filter.text() + "' leaves none of the provider's NICs (" + all + ")";
    return false;
  }
  if (kept.empty()) {
    log_info("only loopback or docker NICs (%s): using them", all.c_str());
    return true;  // the filter refused every NIC, so none was moved out of *nics
  }
  *nics = std::move(kept);
  return true;
}

// Under the plugin's mutex.
ncclResult_t open_devices(Plugin& p) {
  if (p.initialized) return ncclSuccess;
  std::string why;
  std::optional<Settings> settings = read_settings(&why);
  if (!settings) return fail(ncclInvalidArgument, "init: %s", why.c_str());
  apply_libfabric_defaults();
  const Libfabric* libfabric = load_libfabric(&why);
  if (libfabric == nullptr) return fail(ncclSystemError, "init: %s", why.c_str());
  std::optional<ProviderNics> nics = find_provider_nics(*libfabric, settings->provider, &why);
  if (!nics) {
    return fail(ncclSystemError, "init: %s (HMR_NCCL_PROVIDER chooses the provider)", why.c_str());
  }
  if (!select_interfaces(*settings, &nics->nics, &why)) {
    return fail(ncclInvalidArgument, "init: %s", why.c_str());
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (InfoPtr& info : nics->nics) {
    std::unique_ptr<Device> device = Device::open(*libfabric, std::move(info), nics->provider, *settings, &why);
    if (!device) return fail(ncclSystemError, "init: %s", why.c_str());
    const DeviceProperties& props = device->properties();
    log_info("device %zu: %s NIC %s, %d Mbps, pci %s, memory %s%s%s", devices.size(),
             nics->provider.c_str(), props.name.c_str(), props.speed_mbps,
             props.pci_path.empty() ? "unknown" : props.pci_path.c_str(), "host",
             (props.ptr_support & NCCL_PTR_CUDA) ? "+cuda" : "",
             (props.ptr_support & NCCL_PTR_DMABUF) ? "+dmabuf" : "");
    devices.push_back(std::move(device));
  }
  if (nics->provider.rfind("shm", 0) == 0) {
    log_warn("provider shm: for tests only. Real NCCL all_gathers of 256 MiB through it "
             "arrived corrupted on an H200 host (docs/gpu.md); use tcp, verbs or efa for jobs");
  }
  p.devices = std::move(devices);
  p.initialized = true;
  log_info("hmr %u.%u.%u, libfabric %u.%u, provider %s, %zu device(s)", HMR_VERSION_MAJOR,
           HMR_VERSION_MINOR, HMR_VERSION_PATCH, FI_MAJOR(libfabric->version()),
           FI_MINOR(libfabric->version()), nics->provider.c_str(), p.devices.size());
  return ncclSuccess;
}

// Under the plugin's mutex: the last v11 context is gone and no v8-v10 user exists.
void close_devices(Plugin& p) {
  p.connecting.clear();
  for (auto& device : p.devices) {
    std::string why;
    if (!device->close(&why)) {
      log_warn("finalize: device %s kept open: %s", device->properties().name.c_str(), why.c_str());
      (void)device.release();  // still in use by the application's registrations
    }
  }
  p.devices.clear();
  p.initialized = false;
}

ncclResult_t find_device(int dev, Device** out) {
  Plugin& p = plugin();
  if (!p.initialized) return fail(ncclInvalidUsage, "called before init");
  if (dev < 0 || static_cast<size_t>(dev) >= p.devices.size()) {
    return fail(ncclInvalidArgument, "device %d does not exist (%zu devices)", dev, p.devices.size());
  }
  *out = p.devices[static_cast<size_t>(dev)].get();
  return ncclSuccess;
}

ncclResult_t check_context(void* ctx, const char* call) {
  Plugin& p = plugin();
  if (ctx == nullptr ? p.legacy : p.live_contexts.contains(ctx)) return ncclSuccess;
  return fail(ncclInvalidUsage, "%s: %s", call, ctx == nullptr ? "no init() was called"
                                                               : "the context is not initialized");
}

// The device of a send or recv comm, for regMr.
Device* comm_device(void* comm) {
  Plugin& p = plugin();
  if (p.send_comms.contains(comm)) return &static_cast<SendComm*>(comm)->device();
  if (p.recv_comms.contains(comm)) return &static_cast<RecvComm*>(comm)->device();
  return nullptr;
}

template <typename Comm>
void add_requests(Plugin& p, const Comm& comm) {
  for (const void* request : comm.request_addresses()) p.requests.add(request);
}

template <typename Comm>
void remove_requests(Plugin& p, const Comm& comm) {
  for (const void* request : comm.request_addresses()) (void)p.requests.remove(request);
}

std::span<uint8_t, kHandleSize> handle_bytes(void* handle) {
  return std::span<uint8_t, kHandleSize>(static_cast<uint8_t*>(handle), kHandleSize);
}

}  // namespace

ncclResult_t init(ncclDebugLogger_t logger) {
  if (logger != nullptr) set_logger(logger);
  Plugin& p = plugin();
  std::lock_guard lock(p.mutex);
  if (const ncclResult_t rc = open_devices(p); rc != ncclSuccess) return rc;
  p.legacy = true;
  return ncclSuccess;
}

ncclResult_t init_context(void** ctx, uint64_t comm_id, const ncclNetCommConfig_t* config,
                          ncclDebugLogger_t logger) {
  if (ctx == nullptr) return fail(ncclInvalidArgument, "init: no place for the context");
  if (logger != nullptr) set_logger(logger);
  Plugin& p = plugin();
  std::lock_guard lock(p.mutex);
  if (const ncclResult_t rc = open_devices(p); rc != ncclSuccess) return rc;
  auto context = std::make_unique<Context>();
  context->comm_id = comm_id;
  if (config != nullptr) context->traffic_class = config->trafficClass;
  p.live_contexts.add(context.get());
  ++p.contexts;
  *ctx = context.release();
  return ncclSuccess;
}

ncclResult_t finalize(void* ctx) {
  // NULL is the context of an init that failed (NCCL cleans up after it): nothing to end.
  if (ctx == nullptr) return ncclSuccess;
  Plugin& p = plugin();
  // Connections the context started and NCCL stopped calling connect() for (an abort while
  // connecting): nothing will ask for them again, and each holds a port on its device's
  // shared endpoint.  Closed after the plugin's lock is let go (a close may wait a moment for
  // the connect request in flight, and other communicators' calls need the lock meanwhile),
  // and before the context stops counting: the devices close when the last context goes, and
  // a device with a comm still open on it would be kept open for good.
  std::vector<std::unique_ptr<SendComm>> abandoned;
  std::vector<std::unique_ptr<ListenComm>> left_listening;
  std::unique_lock lock(p.mutex);
  if (!p.live_contexts.remove(ctx)) return fail(ncclInvalidUsage, "finalize of a context not initialized");
  for (auto it = p.connecting.begin(); it != p.connecting.end();) {
    if (it->second.ctx == ctx) {
      abandoned.push_back(std::move(it->second.comm));
      it = p.connecting.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = p.listening.begin(); it != p.listening.end();) {
    if (it->second == ctx && p.listen_comms.remove(it->first)) {
      left_listening.emplace_back(static_cast<ListenComm*>(it->first));
      it = p.listening.erase(it);
    } else {
      ++it;
    }
  }
  delete static_cast<Context*>(ctx);
  const size_t closed = abandoned.size(), listeners = left_listening.size();
  if (closed != 0 || listeners != 0) {
    lock.unlock();
    abandoned.clear();
    left_listening.clear();
    lock.lock();
    log_info("finalize: %zu connection(s) never finished and %zu listener(s) left open were "
             "closed", closed, listeners);
  }
  if (--p.contexts == 0 && !p.legacy) close_devices(p);
  return ncclSuccess;
}

ncclResult_t set_net_attr(void* ctx, const ncclNetAttr_v11_t* /*attr*/) {
  // Hints about NCCL's traffic pattern; one endpoint per comm serves any of them.
  return check_context(ctx, "setNetAttr");
}

ncclResult_t devices(int* ndev) {
  Plugin& p = plugin();
  if (ndev == nullptr) return fail(ncclInvalidArgument, "devices: ndev is NULL");
  if (!p.initialized) return fail(ncclInvalidUsage, "devices: called before init");
  *ndev = static_cast<int>(p.devices.size());
  return ncclSuccess;
}

ncclResult_t get_properties(int dev, ncclNetProperties_v11_t* props) {
  Device* device = nullptr;
  if (const ncclResult_t rc = find_device(dev, &device); rc != ncclSuccess) return rc;
  if (props == nullptr) return fail(ncclInvalidArgument, "getProperties: props is NULL");
  const DeviceProperties& d = device->properties();
  std::memset(props, 0, sizeof *props);
  props->name = const_cast<char*>(d.name.c_str());
  props->pciPath = d.pci_path.empty() ? nullptr : const_cast<char*>(d.pci_path.c_str());
  props->guid = d.guid;
  props->ptrSupport = d.ptr_support;
  // What NCCL's own IB transport says; 2.28's core reads it nowhere, and hmr's cache makes
  // registering a registered range again a lookup either way.
  props->regIsGlobal = 1;
  // NCCL 2.28 on sm90 and later, without NCCL_NET_FORCE_FLUSH or a C2C link, calls iflush
  // only when forceFlush is 1 (ncclTopoNeedFlush): the variable would otherwise change
  // nothing NCCL does there.
  props->forceFlush = device->settings().force_flush ? 1 : 0;
  props->speed = d.speed_mbps;
  props->port = 1;
  props->latency = 0;
  props->maxComms = d.max_comms;
  props->maxRecvs = static_cast<int>(kMaxRecvs);
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = d.max_message;
  props->maxCollBytes = d.max_message;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm) {
  if (const ncclResult_t rc = check_context(ctx, "listen"); rc != ncclSuccess) return rc;
  Device* device = nullptr;
  if (const ncclResult_t rc = find_device(dev, &device); rc != ncclSuccess) return rc;
  if (handle == nullptr || listen_comm == nullptr) return fail(ncclInvalidArgument, "listen: NULL argument");
  *listen_comm = nullptr;
  std::unique_ptr<ListenComm> comm;
  if (const ncclResult_t rc = ListenComm::open(*device, handle_bytes(handle), &comm);
      rc != ncclSuccess) {
    return rc;
  }
  Plugin& p = plugin();
  p.listen_comms.add(comm.get());
  if (ctx != nullptr) {
    std::lock_guard lock(p.mutex);
    p.listening.emplace(comm.get(), ctx);
  }
  *listen_comm = comm.release();
  return ncclSuccess;
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm,
                     ncclNetDeviceHandle_t** send_dev_comm) {
  if (const ncclResult_t rc = check_context(ctx, "connect"); rc != ncclSuccess) return rc;
  Device* device = nullptr;
  if (const ncclResult_t rc = find_device(dev, &device); rc != ncclSuccess) return rc;
  if (handle == nullptr || send_comm == nullptr) return fail(ncclInvalidArgument, "connect: NULL argument");
  *send_comm = nullptr;
  if (send_dev_comm != nullptr) *send_dev_comm = nullptr;
  Plugin& p = plugin();
  const auto bytes = handle_bytes(handle);
  std::unique_lock lock(p.mutex);
  uint64_t id = read_connect_state(bytes);
  std::string why;
  if (id == 0) {
    std::optional<ListenHandle> listener = decode_listen_handle(bytes, &why);
    if (!listener) return fail(ncclInvalidArgument, "connect: %s", why.c_str());
    if (listener->provider_tag != provider_tag(device->provider())) {
      return fail(ncclInvalidArgument, "connect: the handle comes from a listener on another "
                  "libfabric provider (this device is %s; set HMR_NCCL_PROVIDER alike on every "
                  "rank)", device->provider().c_str());
    }
    std::unique_ptr<SendComm> comm;
    if (const ncclResult_t rc = SendComm::start(*device, *listener, &comm);
        rc != ncclSuccess) {
      return rc;
    }
    id = p.next_connect_id++;
    p.connecting.emplace(id, Plugin::Connecting{ctx, std::move(comm)});
    write_connect_state(bytes, id);
  }
  auto it = p.connecting.find(id);
  if (it == p.connecting.end()) {
    if (!decode_listen_handle(bytes, &why)) return fail(ncclInvalidArgument, "connect: %s", why.c_str());
    return fail(ncclInvalidArgument, "connect: the handle's connect state names no connection in "
                "progress (a corrupted handle, one whose connect already finished, or one whose "
                "context was finalized)");
  }
  if (it->second.ctx != ctx) {
    return fail(ncclInvalidArgument, "connect: the handle's connection in progress was started "
                "by another context (communicator)");
  }
  bool connected = false;
  const ncclResult_t rc = it->second.comm->poll_connected(&connected);
  if (rc != ncclSuccess || connected) {
    std::unique_ptr<SendComm> comm = std::move(it->second.comm);
    p.connecting.erase(it);
    write_connect_state(bytes, 0);
    if (rc != ncclSuccess) {
      lock.unlock();  // (closing it may wait for its operations a moment)
      comm.reset();
      return rc;
    }
    add_requests(p, *comm);
    p.send_comms.add(comm.get());
    *send_comm = comm.release();
  }
  return ncclSuccess;
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t** recv_dev_comm) {
  if (recv_comm == nullptr) return fail(ncclInvalidArgument, "accept: recvComm is NULL");
  *recv_comm = nullptr;
  if (recv_dev_comm != nullptr) *recv_dev_comm = nullptr;
  Plugin& p = plugin();
  if (!p.listen_comms.contains(listen_comm)) {
    return fail(ncclInvalidUsage, "accept on a listen comm that is closed or was never opened");
  }
  std::unique_ptr<RecvComm> comm;
  if (const ncclResult_t rc = static_cast<ListenComm*>(listen_comm)->accept(&comm); rc != ncclSuccess) {
    return rc;
  }
  if (comm) {
    add_requests(p, *comm);
    p.recv_comms.add(comm.get());
    *recv_comm = comm.release();
  }
  return ncclSuccess;
}

ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  if (mhandle == nullptr) return fail(ncclInvalidArgument, "regMr: mhandle is NULL");
  *mhandle = nullptr;
  Device* device = comm_device(comm);
  if (device == nullptr) return fail(ncclInvalidUsage, "regMr on a comm that is closed or was never opened");
  MemoryHandle* handle = nullptr;
  if (const ncclResult_t rc = register_memory(*device, data, size, type, fd, offset, &handle);
      rc != ncclSuccess) {
    return rc;
  }
  plugin().mhandles.add(handle);
  *mhandle = handle;
  return ncclSuccess;
}

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return reg_mr_dmabuf(comm, data, size, type, 0, -1, mhandle);
}

ncclResult_t dereg_mr(void* /*comm*/, void* mhandle) {
  // The handle, not the comm, says what to release: NCCL may close the comm first.
  // NULL is nothing to release: NCCL's proxy frees a connection whose regMr failed by
  // deregistering every protocol's handle, the failed one's NULL included (seen on an H200
  // with NCCL 2.28; NCCL's own transports ignore a NULL handle too).
  if (mhandle == nullptr) return ncclSuccess;
  if (!plugin().mhandles.remove(mhandle)) {
    return fail(ncclInvalidArgument, "deregMr of %p: not a memory handle this plugin gave out, or "
                "one already deregistered", mhandle);
  }
  return deregister_memory(static_cast<MemoryHandle*>(mhandle));
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                   void** request) {
  if (request == nullptr) return fail(ncclInvalidArgument, "isend: request is NULL");
  *request = nullptr;
  Plugin& p = plugin();
  if (!p.send_comms.contains(send_comm)) {
    return fail(ncclInvalidUsage, "isend on a send comm that is closed or was never connected");
  }
  if (mhandle != nullptr && !p.mhandles.contains(mhandle)) {
    return fail(ncclInvalidArgument, "isend with a memory handle that is not registered");
  }
  return static_cast<SendComm*>(send_comm)->isend(data, size, tag,
                                                  static_cast<MemoryHandle*>(mhandle), request);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request) {
  if (request == nullptr) return fail(ncclInvalidArgument, "irecv: request is NULL");
  *request = nullptr;
  Plugin& p = plugin();
  if (!p.recv_comms.contains(recv_comm)) {
    return fail(ncclInvalidUsage, "irecv on a recv comm that is closed or was never accepted");
  }
  if (n < 1 || static_cast<size_t>(n) > kMaxRecvs || data == nullptr || sizes == nullptr ||
      tags == nullptr || mhandles == nullptr) {
    return fail(ncclInvalidArgument, "irecv of %d buffers: between 1 and %zu, with data, sizes, "
                "tags and mhandles", n, kMaxRecvs);
  }
  MemoryHandle* handles[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (!p.mhandles.contains(mhandles[i])) {
      return fail(ncclInvalidArgument, "irecv buffer %d: the memory handle is not registered", i);
    }
    handles[i] = static_cast<MemoryHandle*>(mhandles[i]);
  }
  return static_cast<RecvComm*>(recv_comm)->irecv(n, data, sizes, tags, handles, request);
}

ncclResult_t iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles,
                    void** request) {
  if (request == nullptr) return fail(ncclInvalidArgument, "iflush: request is NULL");
  *request = nullptr;
  Plugin& p = plugin();
  if (!p.recv_comms.contains(recv_comm)) {
    return fail(ncclInvalidUsage, "iflush on a recv comm that is closed or was never accepted");
  }
  if (n < 1 || static_cast<size_t>(n) > kMaxRecvs || data == nullptr || sizes == nullptr ||
      mhandles == nullptr) {
    return fail(ncclInvalidArgument, "iflush of %d buffers: between 1 and %zu", n, kMaxRecvs);
  }
  MemoryHandle* handles[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    handles[i] = p.mhandles.contains(mhandles[i]) ? static_cast<MemoryHandle*>(mhandles[i]) : nullptr;
  }
  return static_cast<RecvComm*>(recv_comm)->iflush(n, data, sizes, handles, request);
}

ncclResult_t test(void* request, int* done, int* sizes) {
  if (request == nullptr) return fail(ncclInvalidArgument, "test: request is NULL");
  if (!plugin().requests.contains(request)) {
    return fail(ncclInvalidArgument, "test of %p: not a request of an open comm of this plugin "
                "(its comm is closed, or it never was one)", request);
  }
  auto* r = static_cast<Request*>(request);
  // An idle slot was already reported done or failed (or never handed out): answering
  // "not done" would keep a caller that tests it again waiting forever.
  if (r->state == RequestState::idle) {
    return fail(ncclInvalidUsage, "test of %p: the request already completed (a request is "
                "tested until done, then never again)", request);
  }
  switch (r->kind) {
    case RequestKind::send: {
      auto* s = static_cast<SendRequest*>(r);
      return s->comm->test(s, done, sizes);
    }
    case RequestKind::receive: {
      auto* s = static_cast<ReceiveRequest*>(r);
      return s->comm->test(s, done, sizes);
    }
    case RequestKind::flush: {
      auto* s = static_cast<FlushRequest*>(r);
      return s->comm->test(s, done);
    }
  }
  return fail(ncclInvalidArgument, "test: not a request of this plugin");
}

ncclResult_t close_send(void* send_comm) {
  if (!plugin().send_comms.remove(send_comm)) {
    return fail(ncclInvalidUsage, "closeSend of a send comm that is not open");
  }
  auto* comm = static_cast<SendComm*>(send_comm);
  remove_requests(plugin(), *comm);
  comm->drain();  // a failure notice for the receiver may still be queued
  delete comm;
  return ncclSuccess;
}

ncclResult_t close_recv(void* recv_comm) {
  if (!plugin().recv_comms.remove(recv_comm)) {
    return fail(ncclInvalidUsage, "closeRecv of a recv comm that is not open");
  }
  remove_requests(plugin(), *static_cast<RecvComm*>(recv_comm));
  delete static_cast<RecvComm*>(recv_comm);
  return ncclSuccess;
}

ncclResult_t close_listen(void* listen_comm) {
  Plugin& p = plugin();
  if (!p.listen_comms.remove(listen_comm)) {
    return fail(ncclInvalidUsage, "closeListen of a listen comm that is not open");
  }
  {
    std::lock_guard lock(p.mutex);
    p.listening.erase(listen_comm);
  }
  delete static_cast<ListenComm*>(listen_comm);
  return ncclSuccess;
}

int query_stats(int dev, hmr_domain_stats* stats) {
  Device* device = nullptr;
  if (find_device(dev, &device) != ncclSuccess) return -HMR_EINVAL;
  return hmr_domain_query_stats(device->registrations(), stats);
}

}  // namespace hmr::nccl::api
