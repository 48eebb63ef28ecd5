#include "tests/hmem/ze_fake_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace hmr::testing {
namespace {

template <typename Fn>
Fn must_find(void* handle, const char* path, const char* name) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake Level Zero loader %s lacks %s\n", path, name);
    std::abort();
  }
  return reinterpret_cast<Fn>(address);
}

FakeZe load(const char* path) {
  // The same path the iface opens through HMR_ZE_LIBRARY, so dlopen returns the same object.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load the fake Level Zero loader: %s\n", dlerror());
    std::abort();
  }
  FakeZe fake;
  fake.path = path;
  fake.reset = must_find<fake_ze_reset_fn>(handle, path, "fake_ze_reset");
  fake.alloc = must_find<fake_ze_alloc_fn>(handle, path, "fake_ze_alloc");
  fake.free = must_find<fake_ze_free_fn>(handle, path, "fake_ze_free");
  fake.read = must_find<fake_ze_read_fn>(handle, path, "fake_ze_read");
  fake.set_failure = must_find<fake_ze_set_failure_fn>(handle, path, "fake_ze_set_failure");
  fake.call_count = must_find<fake_ze_call_count_fn>(handle, path, "fake_ze_call_count");
  fake.set_driver_count =
      must_find<fake_ze_set_driver_count_fn>(handle, path, "fake_ze_set_driver_count");
  fake.live_contexts = must_find<fake_ze_live_contexts_fn>(handle, path, "fake_ze_live_contexts");
  fake.live_command_lists =
      must_find<fake_ze_live_command_lists_fn>(handle, path, "fake_ze_live_command_lists");
  fake.export_flags = must_find<fake_ze_export_flags_fn>(handle, path, "fake_ze_export_flags");
  fake.last_init_flags =
      must_find<fake_ze_last_init_flags_fn>(handle, path, "fake_ze_last_init_flags");
  return fake;  // the handle stays open for the life of the process, on purpose
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
