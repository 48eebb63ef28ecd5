// ncclNetPlugin_v8 (NCCL 2.20-2.23): int message sizes, widened here to the implementation's
// size_t (a negative size is refused).
#include "../abi/nccl_net_v8.h"
#include "../net/log.h"
#include "../wire/limits.h"
#include "../net/net_api.h"
#include "properties_adapter.h"

namespace hmr::nccl::exports {
namespace {

ncclResult_t listen(int dev, void* handle, void** comm) { return api::listen(nullptr, dev, handle, comm); }

ncclResult_t connect(int dev, void* handle, void** comm, ncclNetDeviceHandle_t** dev_comm) {
  return api::connect(nullptr, dev, handle, comm, dev_comm);
}

ncclResult_t isend(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return fail(ncclInvalidArgument, "isend of %d bytes", size);
  return api::isend(comm, data, static_cast<size_t>(size), tag, mhandle, request);
}

ncclResult_t irecv(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) {
  if (n < 1 || n > static_cast<int>(kMaxRecvs) || sizes == nullptr) {
    return api::irecv(comm, n, data, nullptr, tags, mhandles, request);  // refused with a reason
  }
  size_t wide[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return fail(ncclInvalidArgument, "irecv buffer %d of %d bytes", i, sizes[i]);
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return api::irecv(comm, n, data, wide, tags, mhandles, request);
}

ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return api::iflush(comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace hmr::nccl::exports

using namespace hmr::nccl;

extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    api::kPluginName,
    api::init,
    api::devices,
    exports::get_properties_as<ncclNetProperties_v8_t>,
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
};
