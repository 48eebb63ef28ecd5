// The fake ROCr runtimes as tests see them: libhsa-runtime64.so.1 built from
// tests/fakes/fake_hsa.c as ROCm >= 5.6 (HMR_FAKE_HSA_PATH) and as ROCm 5.2, without dma-buf
// export (HMR_FAKE_HSA_ROCM52_PATH).  Each is opened once and kept open so its state outlives
// every RocrIface, and reached through its test-only control entry points.
#pragma once

#include "tests/fakes/fake_hsa_control.h"

namespace hmr::testing {

struct FakeHsa {
  const char* path = nullptr;
  fake_hsa_reset_fn reset = nullptr;
  fake_hsa_alloc_fn alloc = nullptr;
  fake_hsa_free_fn free = nullptr;
  fake_hsa_read_fn read = nullptr;
  fake_hsa_set_failure_fn set_failure = nullptr;
  fake_hsa_set_failure_once_fn set_failure_once = nullptr;
  fake_hsa_call_count_fn call_count = nullptr;
  fake_hsa_init_count_fn init_count = nullptr;
  fake_hsa_notifier_count_fn notifier_count = nullptr;
  fake_hsa_set_gpu_count_fn set_gpu_count = nullptr;
  fake_hsa_set_dmabuf_supported_fn set_dmabuf_supported = nullptr;
  fake_hsa_last_export_fn last_export = nullptr;
  fake_hsa_allowed_agents_fn allowed_agents = nullptr;
  fake_hsa_import_fn import = nullptr;
  fake_hsa_reserve_fn reserve = nullptr;
  fake_hsa_runtime_crashes_fn runtime_crashes = nullptr;
};

// Abort the test binary if the fake cannot be loaded: every ROCr test depends on it.
const FakeHsa& fake_hsa();
const FakeHsa& fake_hsa_rocm52();

}  // namespace hmr::testing
