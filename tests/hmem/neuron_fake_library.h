// The fake Neuron runtime as tests see it: the libraries at HMR_FAKE_NRT_PATH (with
// nrt_get_dmabuf_fd_v2) and HMR_FAKE_NRT_V1_PATH (without it), real libnrt.so.1 files built from
// tests/fakes/fake_nrt.c, each opened once and kept open so its state outlives every
// NeuronIface.  Besides the test-only controls it has the runtime's own allocation calls, for
// tests that play an application allocating Neuron memory without hmr.
#pragma once

#include <cstddef>

#include "tests/fakes/fake_nrt_control.h"

namespace hmr::testing {

struct FakeNrt {
  // The runtime's own nrt_init, called by tests as the application (hmr never calls it).
  using InitFn = int (*)(int framework, const char* fw_version, const char* fal_version);
  InitFn application_init = nullptr;
  fake_nrt_reset_fn reset = nullptr;
  fake_nrt_set_failure_fn set_failure = nullptr;
  fake_nrt_call_count_fn call_count = nullptr;
  fake_nrt_live_tensors_fn live_tensors = nullptr;
  fake_nrt_last_export_fn last_export = nullptr;
  fake_nrt_set_export_gives_no_fd_fn set_export_gives_no_fd = nullptr;
  // The runtime's own allocation calls, with nrt's types reduced to what the tests pass.
  using TensorAllocateFn = int (*)(int, int, size_t, const char*, void**);
  using TensorGetVaFn = void* (*)(const void*);
  using TensorFreeFn = void (*)(void**);
  TensorAllocateFn tensor_allocate = nullptr;
  TensorGetVaFn tensor_get_va = nullptr;
  TensorFreeFn tensor_free = nullptr;
};

const char* fake_nrt_path();     // exports nrt_get_dmabuf_fd_v2
const char* fake_nrt_v1_path();  // lacks it
// Aborts the test binary if the fake cannot be loaded: every Neuron test depends on it.
const FakeNrt& fake_nrt(const char* path);

// An application allocating Neuron memory without hmr: nrt_tensor_allocate(DEVICE, vnc, size)
// on the fake; returns the tensor's VA (null on failure) and the tensor to free later.
void* app_tensor_allocate(const FakeNrt& fake, int vnc, size_t size, void** tensor);
void app_tensor_free(const FakeNrt& fake, void* tensor);

}  // namespace hmr::testing
