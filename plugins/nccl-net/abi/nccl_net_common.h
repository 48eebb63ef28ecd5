/* The parts of NCCL's net plugin ABI every version shares, declared from the published facts
 * (NCCL's public plugin headers; ../../../docs/nccl-plugin.md lists what is used), not copied.
 * C, so the declarations read the same as the C ABI NCCL calls through. */
#ifndef HMR_NCCL_NET_COMMON_H
#define HMR_NCCL_NET_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
} ncclResult_t;

typedef enum {
	NCCL_LOG_NONE = 0,
	NCCL_LOG_VERSION = 1,
	NCCL_LOG_WARN = 2,
	NCCL_LOG_INFO = 3,
	NCCL_LOG_ABORT = 4,
	NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

/* NCCL's subsystem flags for log lines; the plugin logs as NET. */
#define NCCL_INIT 0x1UL
#define NCCL_NET 0x10UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
				  int line, const char *fmt, ...);
/* v10+: a callback into NCCL's profiler; this plugin records no events, so it is only kept. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **event, int type, void *parent,
					       int64_t plugin_id, void *extra);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#define NCCL_NET_DEVICE_HOST 0
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1

/* What NCCL passes where a device-side (GPU-initiated) net handle would go; this plugin offers
 * none (netDeviceType host), so it is only ever set to NULL. */
typedef struct {
	int netDeviceType;
	int netDeviceVersion;
	void *handle;
	size_t size;
	int needsProxyProgress;
} ncclNetDeviceHandle_t;

typedef struct {
	int ndevs;
	int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_t;

typedef struct {
	int trafficClass;
} ncclNetCommConfig_t;

#ifdef __cplusplus
}
#endif

#endif
