// The fake Level Zero loaders as tests see them: libze_loader.so.1 built from
// tests/fakes/fake_ze.c with API 1.6 features (HMR_FAKE_ZE_PATH) and as an API 1.0 loader
// (HMR_FAKE_ZE_API10_PATH).  Each is opened once and kept open so its state outlives every
// ZeIface, and reached through its test-only control entry points.
#pragma once

#include "tests/fakes/fake_ze_control.h"

namespace hmr::testing {

struct FakeZe {
  const char* path = nullptr;
  fake_ze_reset_fn reset = nullptr;
  fake_ze_alloc_fn alloc = nullptr;
  fake_ze_free_fn free = nullptr;
  fake_ze_read_fn read = nullptr;
  fake_ze_set_failure_fn set_failure = nullptr;
  fake_ze_set_failure_once_fn set_failure_once = nullptr;
  fake_ze_call_count_fn call_count = nullptr;
  fake_ze_set_driver_count_fn set_driver_count = nullptr;
  fake_ze_set_fd_per_export_fn set_fd_per_export = nullptr;
  fake_ze_live_contexts_fn live_contexts = nullptr;
  fake_ze_live_command_lists_fn live_command_lists = nullptr;
  fake_ze_export_flags_fn export_flags = nullptr;
  fake_ze_last_init_flags_fn last_init_flags = nullptr;
  fake_ze_alloc_on_tile_fn alloc_on_tile = nullptr;
  fake_ze_driver_export_fd_fn driver_export_fd = nullptr;
};

// Abort the test binary if the fake cannot be loaded: every ZE test depends on it.
const FakeZe& fake_ze();
const FakeZe& fake_ze_api10();

}  // namespace hmr::testing
