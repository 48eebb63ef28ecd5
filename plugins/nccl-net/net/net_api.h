// The plugin's one implementation of NCCL's net interface, in the widest form the ABI versions
// have (v11's context argument, size_t sizes, v11 properties).  exports/ adapts each published
// table, ncclNetPlugin_v8 to _v11, onto these.  Every entry point checks that the comms and
// handles it is given are alive before touching them, and every error it returns is logged
// with its reason.
#pragma once

#include <hmr/hmr.h>

#include "../abi/nccl_net_v11.h"

namespace hmr::nccl::api {

inline constexpr const char* kPluginName = "hmr";

// v8-v10: one process-wide context, set up by the first init and kept.
ncclResult_t init(ncclDebugLogger_t logger);
// v11: a context per communicator; the last finalize closes the devices.
ncclResult_t init_context(void** ctx, uint64_t comm_id, const ncclNetCommConfig_t* config,
                          ncclDebugLogger_t logger);
ncclResult_t finalize(void* ctx);
ncclResult_t set_net_attr(void* ctx, const ncclNetAttr_v11_t* attr);

ncclResult_t devices(int* ndev);
ncclResult_t get_properties(int dev, ncclNetProperties_v11_t* props);

// `ctx` is nullptr for v8-v10.
ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm);
ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm,
                     ncclNetDeviceHandle_t** send_dev_comm);
ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t** recv_dev_comm);

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle);
ncclResult_t dereg_mr(void* comm, void* mhandle);

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                   void** request);
ncclResult_t irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request);
ncclResult_t iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles,
                    void** request);
ncclResult_t test(void* request, int* done, int* sizes);

ncclResult_t close_send(void* send_comm);
ncclResult_t close_recv(void* recv_comm);
ncclResult_t close_listen(void* listen_comm);

// Not in NCCL's ABI: hmr's registration statistics of device `dev` (for tests and diagnostics).
int query_stats(int dev, hmr_domain_stats* stats);

}  // namespace hmr::nccl::api
