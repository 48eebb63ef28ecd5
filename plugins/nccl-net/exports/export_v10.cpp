// ncclNetPlugin_v10 (NCCL 2.26-2.27): one process-wide context; the traffic class arrives per
// connect and the profiler handles per operation, both unused.
#include "../abi/nccl_net_v10.h"
#include "../net/net_api.h"
#include "properties_adapter.h"

namespace hmr::nccl::exports {
namespace {

ncclResult_t init(ncclDebugLogger_t logger, ncclProfilerCallback_t /*profiler*/) {
  return api::init(logger);
}

ncclResult_t listen(int dev, void* handle, void** comm) { return api::listen(nullptr, dev, handle, comm); }

ncclResult_t connect(int dev, ncclNetCommConfig_t* /*config*/, void* handle, void** comm,
                     ncclNetDeviceHandle_t** dev_comm) {
  return api::connect(nullptr, dev, handle, comm, dev_comm);
}

ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/,
                   void** request) {
  return api::isend(comm, data, size, tag, mhandle, request);
}

ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** /*phandles*/, void** request) {
  return api::irecv(comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return api::iflush(comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace hmr::nccl::exports

using namespace hmr::nccl;

extern "C" __attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    api::kPluginName,
    exports::init,
    api::devices,
    exports::get_properties_as<ncclNetProperties_v10_t>,
    exports::listen,
    exports::connect,
    api::accept,
    api::reg_mr,
    api::reg_mr_dmabuf,
    api::dereg_mr,
    exports::isend,
    exports::irecv,
    exports::iflush,
    api::test,
    api::close_send,
    api::close_recv,
    api::close_listen,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice
};
