#include "tests/hmem/synapseai_fake_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr::testing {
namespace {

void* open_fake(const char* path) {
  // The same path the iface opens through its override, so dlopen returns the same object.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load fake library %s: %s\n", path, dlerror());
    std::abort();
  }
  return handle;  // stays open for the life of the process, on purpose
}

template <typename Fn>
Fn must_find(void* handle, const char* path, const char* name) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake library %s lacks %s\n", path, name);
    std::abort();
  }
  return reinterpret_cast<Fn>(address);
}

FakeSynapse load_synapse(const char* path) {
  void* handle = open_fake(path);
  FakeSynapse fake;
  fake.reset = must_find<fake_synapse_reset_fn>(handle, path, "fake_synapse_reset");
  fake.set_failure =
      must_find<fake_synapse_set_failure_fn>(handle, path, "fake_synapse_set_failure");
  fake.call_count = must_find<fake_synapse_call_count_fn>(handle, path, "fake_synapse_call_count");
  fake.alloc = must_find<fake_synapse_alloc_fn>(handle, path, "fake_synapse_alloc");
  fake.free = must_find<fake_synapse_free_fn>(handle, path, "fake_synapse_free");
  fake.last_lookup =
      must_find<fake_synapse_last_lookup_fn>(handle, path, "fake_synapse_last_lookup");
  return fake;
}

FakeHlthunk load_hlthunk(const char* path) {
  void* handle = open_fake(path);
  FakeHlthunk fake;
  fake.reset = must_find<fake_hlthunk_reset_fn>(handle, path, "fake_hlthunk_reset");
  fake.set_failure =
      must_find<fake_hlthunk_set_failure_fn>(handle, path, "fake_hlthunk_set_failure");
  fake.call_count = must_find<fake_hlthunk_call_count_fn>(handle, path, "fake_hlthunk_call_count");
  fake.open_devices =
      must_find<fake_hlthunk_open_devices_fn>(handle, path, "fake_hlthunk_open_devices");
  fake.live_handles =
      must_find<fake_hlthunk_live_handles_fn>(handle, path, "fake_hlthunk_live_handles");
  fake.live_mappings =
      must_find<fake_hlthunk_live_mappings_fn>(handle, path, "fake_hlthunk_live_mappings");
  fake.last_export =
      must_find<fake_hlthunk_last_export_fn>(handle, path, "fake_hlthunk_last_export");
  fake.set_busy = must_find<fake_hlthunk_set_busy_fn>(handle, path, "fake_hlthunk_set_busy");
  return fake;
}

}  // namespace

const char* fake_synapse_path() { return HMR_FAKE_SYNAPSE_PATH; }
const char* fake_hlthunk_path() { return HMR_FAKE_HLTHUNK_PATH; }
const char* fake_hlthunk_noexport_path() { return HMR_FAKE_HLTHUNK_NOEXPORT_PATH; }

const FakeSynapse& fake_synapse() {
  static const FakeSynapse fake = load_synapse(fake_synapse_path());
  return fake;
}

const FakeHlthunk& fake_hlthunk(const char* path) {
  static const FakeHlthunk with_export = load_hlthunk(fake_hlthunk_path());
  static const FakeHlthunk without_export = load_hlthunk(fake_hlthunk_noexport_path());
  if (std::strcmp(path, fake_hlthunk_path()) == 0) return with_export;
  if (std::strcmp(path, fake_hlthunk_noexport_path()) == 0) return without_export;
  std::fprintf(stderr, "no fake hl-thunk at %s\n", path);
  std::abort();
}

}  // namespace hmr::testing
