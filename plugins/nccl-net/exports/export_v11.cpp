// ncclNetPlugin_v11 (NCCL 2.28): the implementation's own shape, so mostly direct.
#include "../abi/nccl_net_v11.h"
#include "../net/net_api.h"
#include "properties_adapter.h"

namespace hmr::nccl::exports {
namespace {

ncclResult_t init(void** ctx, uint64_t comm_id, ncclNetCommConfig_t* config,
                  ncclDebugLogger_t logger, ncclProfilerCallback_t /*profiler*/) {
  return api::init_context(ctx, comm_id, config, logger);
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

ncclResult_t set_net_attr(void* ctx, ncclNetAttr_v11_t* attr) { return api::set_net_attr(ctx, attr); }

}  // namespace
}  // namespace hmr::nccl::exports

using namespace hmr::nccl;

extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    api::kPluginName,
    exports::init,
    api::devices,
    exports::get_properties_as<ncclNetProperties_v11_t>,
    api::listen,
    api::connect,
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
    nullptr,  // getDeviceMr: no device-side (GPU-initiated) networking
    nullptr,  // irecvConsumed: likewise
    nullptr,  // makeVDevice: no NIC fusion; NCCL then uses each device as it is
    api::finalize,
    exports::set_net_attr,
};
