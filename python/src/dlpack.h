/*
 * The DLPack structures hmr reads, as the DLPack specification lays them out (dlpack.h of
 * https://github.com/dmlc/dlpack, ABI stable since v0.6; the unversioned DLManagedTensor that
 * `__dlpack__()` returns in a capsule named "dltensor").  Only the layout is restated here.
 */
#ifndef HMR_PY_DLPACK_H
#define HMR_PY_DLPACK_H

#include <stdint.h>

/* DLDeviceType values hmr tells apart (others are reported as not CPU memory). */
enum {
	HMR_DL_CPU = 1,
	HMR_DL_CUDA = 2,
	HMR_DL_CUDA_HOST = 3,
	HMR_DL_ROCM = 10,
	HMR_DL_ROCM_HOST = 11,
	HMR_DL_CUDA_MANAGED = 13,
	HMR_DL_ONEAPI = 14,
};

typedef struct {
	int32_t device_type;
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides;   /* in elements; NULL: compact row-major */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* DLPack 1.0: the versioned tensor a "dltensor_versioned" capsule holds, with flags (the
 * array API's __dlpack__(max_version=...)). */
typedef struct {
	uint32_t major;
	uint32_t minor;
} DLPackVersion;

#define HMR_DLPACK_FLAG_READ_ONLY (1ULL << 0)
#define HMR_DLPACK_FLAG_IS_COPIED (1ULL << 1) /* the producer made a copy for this export */

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif
