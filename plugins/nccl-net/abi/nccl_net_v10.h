/* ncclNet_v10_t (NCCL 2.26 - 2.27): v9's properties; init takes a profiler callback, connect
 * a traffic-class config, isend/irecv profiler handles. */
#ifndef HMR_NCCL_NET_V10_H
#define HMR_NCCL_NET_V10_H

#include "nccl_net_v9.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(int dev, ncclNetCommConfig_t *config, void *handle, void **sendComm,
				ncclNetDeviceHandle_t **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_t *props);
} ncclNet_v10_t;

#ifdef __cplusplus
}
#endif

#endif
