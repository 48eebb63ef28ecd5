/* ncclNet_v11_t (NCCL 2.28): a plugin context per communicator (init returns it, listen and
 * connect take it, finalize ends it), the traffic class moved to init, maxMultiRequestSize,
 * setNetAttr. */
#ifndef HMR_NCCL_NET_V11_H
#define HMR_NCCL_NET_V11_H

#include "nccl_net_v9.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	char *name;
	char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int forceFlush;
	int speed;
	int port;
	float latency;
	int maxComms;
	int maxRecvs;
	int netDeviceType;
	int netDeviceVersion;
	ncclNetVDeviceProps_t vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
	int maxMultiRequestSize;
} ncclNetProperties_v11_t;

/* Hints about the communication pattern (-1: undefined); this plugin accepts and ignores them. */
typedef struct {
	int32_t maxConcurrentPeers;
	int32_t minConcurrentPeers;
	int32_t maxFlowsPerPeer;
	int32_t minFlowsPerPeer;
} ncclNetCommAttr_t;
typedef struct {
	ncclNetCommAttr_t sendCommAttr;
	ncclNetCommAttr_t recvCommAttr;
	uint32_t op;
	uint32_t algo;
	uint32_t proto;
} ncclNetAttr_v11_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_t *config,
			     ncclDebugLogger_t logger, ncclProfilerCallback_t profiler);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
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
	ncclResult_t (*finalize)(void *ctx);
	ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *attr);
} ncclNet_v11_t;

#ifdef __cplusplus
}
#endif

#endif
