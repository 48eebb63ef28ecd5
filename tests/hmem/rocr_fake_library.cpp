#include "tests/hmem/rocr_fake_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace hmr::testing {
namespace {

template <typename Fn>
Fn must_find(void* handle, const char* path, const char* name) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake ROCr runtime %s lacks %s\n", path, name);
    std::abort();
  }
  return reinterpret_cast<Fn>(address);
}

FakeHsa load(const char* path) {
  // The same path the iface opens through HMR_ROCR_LIBRARY, so dlopen returns the same object.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load the fake ROCr runtime: %s\n", dlerror());
    std::abort();
  }
  FakeHsa fake;
  fake.path = path;
  fake.reset = must_find<fake_hsa_reset_fn>(handle, path, "fake_hsa_reset");
  fake.alloc = must_find<fake_hsa_alloc_fn>(handle, path, "fake_hsa_alloc");
  fake.free = must_find<fake_hsa_free_fn>(handle, path, "fake_hsa_free");
  fake.read = must_find<fake_hsa_read_fn>(handle, path, "fake_hsa_read");
  fake.set_failure = must_find<fake_hsa_set_failure_fn>(handle, path, "fake_hsa_set_failure");
  fake.call_count = must_find<fake_hsa_call_count_fn>(handle, path, "fake_hsa_call_count");
  fake.init_count = must_find<fake_hsa_init_count_fn>(handle, path, "fake_hsa_init_count");
  fake.notifier_count =
      must_find<fake_hsa_notifier_count_fn>(handle, path, "fake_hsa_notifier_count");
  fake.set_gpu_count = must_find<fake_hsa_set_gpu_count_fn>(handle, path, "fake_hsa_set_gpu_count");
  fake.set_dmabuf_supported =
      must_find<fake_hsa_set_dmabuf_supported_fn>(handle, path, "fake_hsa_set_dmabuf_supported");
  fake.last_export = must_find<fake_hsa_last_export_fn>(handle, path, "fake_hsa_last_export");
  fake.allowed_agents =
      must_find<fake_hsa_allowed_agents_fn>(handle, path, "fake_hsa_allowed_agents");
  return fake;  // the handle stays open for the life of the process, on purpose
}

}  // namespace

const FakeHsa& fake_hsa() {
  static const FakeHsa fake = load(HMR_FAKE_HSA_PATH);
  return fake;
}

const FakeHsa& fake_hsa_rocm52() {
  static const FakeHsa fake = load(HMR_FAKE_HSA_ROCM52_PATH);
  return fake;
}

}  // namespace hmr::testing
