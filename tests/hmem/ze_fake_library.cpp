#include "tests/hmem/ze_fake_library.h"

#include "tests/hmem/fake_library.h"

namespace hmr::testing {
namespace {

FakeZe load(const char* path) {
  const FakeLibrary library("fake Level Zero loader", path);
  FakeZe fake;
  fake.path = path;
  fake.reset = library.function<fake_ze_reset_fn>("fake_ze_reset");
  fake.alloc = library.function<fake_ze_alloc_fn>("fake_ze_alloc");
  fake.free = library.function<fake_ze_free_fn>("fake_ze_free");
  fake.read = library.function<fake_ze_read_fn>("fake_ze_read");
  fake.set_failure = library.function<fake_ze_set_failure_fn>("fake_ze_set_failure");
  fake.set_failure_once =
      library.function<fake_ze_set_failure_once_fn>("fake_ze_set_failure_once");
  fake.call_count = library.function<fake_ze_call_count_fn>("fake_ze_call_count");
  fake.set_driver_count = library.function<fake_ze_set_driver_count_fn>("fake_ze_set_driver_count");
  fake.set_fd_per_export =
      library.function<fake_ze_set_fd_per_export_fn>("fake_ze_set_fd_per_export");
  fake.live_contexts = library.function<fake_ze_live_contexts_fn>("fake_ze_live_contexts");
  fake.live_command_lists =
      library.function<fake_ze_live_command_lists_fn>("fake_ze_live_command_lists");
  fake.export_flags = library.function<fake_ze_export_flags_fn>("fake_ze_export_flags");
  fake.last_init_flags = library.function<fake_ze_last_init_flags_fn>("fake_ze_last_init_flags");
  fake.alloc_on_tile = library.function<fake_ze_alloc_on_tile_fn>("fake_ze_alloc_on_tile");
  fake.driver_export_fd = library.function<fake_ze_driver_export_fd_fn>("fake_ze_driver_export_fd");
  return fake;
}

}  // namespace

const FakeZe& fake_ze() {
  static const FakeZe fake = load(HMR_FAKE_ZE_PATH);
  return fake;
}

const FakeZe& fake_ze_api10() {
  static const FakeZe fake = load(HMR_FAKE_ZE_API10_PATH);
  return fake;
}

}  // namespace hmr::testing
