// The NCCL net plugin as NCCL sees it: a shared object dlopen'ed by path, one exported table
// per ABI version (ncclNetPlugin_v11 ... _v8) looked up with dlsym, its name and members
// checked before use.  Each version is wrapped in one interface of v11's shape, so a scenario
// is written once and runs against every table.  Nothing here links the plugin or its sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <hmr/hmr.h>

#include "abi/nccl_net_v10.h"
#include "abi/nccl_net_v11.h"
#include "abi/nccl_net_v8.h"
#include "abi/nccl_net_v9.h"

namespace hmr::nccl::test {

inline constexpr int kAbiVersions[] = {11, 10, 9, 8};

// The fields every version has, and the v9+ ones (0 where the version lacks them).
struct Properties {
  std::string name;
  std::string pci_path;  // empty: NULL
  uint64_t guid = 0;
  int ptr_support = 0;
  int reg_is_global = 0;
  int force_flush = 0;
  int speed = 0;
  int port = 0;
  float latency = 0;
  int max_comms = 0;
  int max_recvs = 0;
  int net_device_type = -1;
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
  int vdevs = 0;
  int max_multi_request_size = 0;
};

class Net {
 public:
  virtual ~Net() = default;
  virtual int version() const = 0;
  virtual const char* name() const = 0;
  // v11: a context per call (init_context); v8-v10: the process-wide init.
  virtual ncclResult_t init(ncclDebugLogger_t logger) = 0;
  virtual ncclResult_t finalize() = 0;  // v11: the context from init; else nothing to do
  virtual ncclResult_t devices(int* ndev) = 0;
  virtual ncclResult_t properties(int dev, Properties* out) = 0;
  virtual ncclResult_t listen(int dev, void* handle, void** comm) = 0;
  virtual ncclResult_t connect(int dev, void* handle, void** comm) = 0;
  virtual ncclResult_t accept(void* listen_comm, void** comm) = 0;
  virtual ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) = 0;
  virtual ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type,
                                     uint64_t offset, int fd, void** mh) = 0;
  virtual ncclResult_t dereg_mr(void* comm, void* mh) = 0;
  virtual ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh,
                             void** request) = 0;
  virtual ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                             void** request) = 0;
  virtual ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhs,
                              void** request) = 0;
  virtual ncclResult_t test(void* request, int* done, int* sizes) = 0;
  virtual ncclResult_t close_send(void* comm) = 0;
  virtual ncclResult_t close_recv(void* comm) = 0;
  virtual ncclResult_t close_listen(void* comm) = 0;
};

class PluginLibrary {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL), as NCCL opens "libnccl-net-<NCCL_NET_PLUGIN>.so".
  static std::unique_ptr<PluginLibrary> open(const std::string& path, std::string* why);
  ~PluginLibrary();

  // dlsym("ncclNetPlugin_v<version>") and the checks NCCL relies on: a name, every mandatory
  // member set.  nullptr and `why` when the table is missing or incomplete.
  std::unique_ptr<Net> table(int version, std::string* why) const;
  // The plugin's own statistics call (not in NCCL's ABI): hmr_domain_stats of a device.
  int query_stats(int dev, struct hmr_domain_stats* stats) const;
  void* handle() const { return handle_; }

 private:
  explicit PluginLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

// The built plugin: $HMR_NCCL_PLUGIN if set, else the path CMake compiled in.
std::string plugin_path();

// For tests: the built plugin, opened on first use and kept for the process's life, and its
// ncclNetPlugin_v<version> table.  A plugin that cannot be opened, or lacks the table, aborts
// the test binary with the reason (nothing after it could mean anything).
const PluginLibrary& plugin_library_or_abort();
std::unique_ptr<Net> plugin_table_or_abort(int version);

// A v11 table found some other way (NCCL's own socket transport: nccl_socket_reference.h),
// checked and wrapped as the plugin's are (setNetAttr may be NULL, as in NCCL's own tables);
// nullptr and `why` when a mandatory member is NULL.
std::unique_ptr<Net> wrap_v11_table(const void* table, std::string* why);

}  // namespace hmr::nccl::test
