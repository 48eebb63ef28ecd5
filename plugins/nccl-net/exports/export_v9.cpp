// ncclNetPlugin_v9 (NCCL 2.24-2.25): v10 without the profiler and the traffic class.
#include "../abi/nccl_net_v9.h"
#include "../net/net_api.h"
#include "properties_adapter.h"

namespace hmr::nccl::exports {
namespace {

ncclResult_t listen(int dev, void* handle, void** comm) { return api::listen(nullptr, dev, handle, comm); }

ncclResult_t connect(int dev, void* handle, void** comm, ncclNetDeviceHandle_t** dev_comm) {
  return api::connect(nullptr, dev, handle, comm, dev_comm);
}

ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** request) {
  return api::irecv(comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return api::iflush(comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace hmr::nccl::exports

using namespace hmr::nccl;

extern "C" __attribute__((visibility("default"))) const ncclNet_v9_t ncclNetPlugin_v9 = {
    api::kPluginName,
    api::init,
    api::devices,
    exports::get_properties_as<ncclNetProperties_v9_t>,
    exports::listen,
    exports::connect,
    api::accept,
    api::reg_mr,
    api::reg_mr_dmabuf,
    api::dereg_mr,
    api::isend,
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
