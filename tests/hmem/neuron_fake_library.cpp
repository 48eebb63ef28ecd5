#include "tests/hmem/neuron_fake_library.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr::testing {
namespace {

template <typename Fn>
Fn must_find(void* handle, const char* path, const char* name) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake Neuron runtime %s lacks %s\n", path, name);
    std::abort();
  }
  return reinterpret_cast<Fn>(address);
}

using TensorAllocateFn = int (*)(int, int, size_t, const char*, void**);
using TensorGetVaFn = void* (*)(const void*);
using TensorFreeFn = void (*)(void**);

FakeNrt load(const char* path) {
  // The same path the iface opens through HMR_NEURON_LIBRARY, so dlopen returns the same object.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load the fake Neuron runtime: %s\n", dlerror());
    std::abort();
  }
  FakeNrt fake;
  fake.reset = must_find<fake_nrt_reset_fn>(handle, path, "fake_nrt_reset");
  fake.set_failure = must_find<fake_nrt_set_failure_fn>(handle, path, "fake_nrt_set_failure");
  fake.call_count = must_find<fake_nrt_call_count_fn>(handle, path, "fake_nrt_call_count");
  fake.live_tensors = must_find<fake_nrt_live_tensors_fn>(handle, path, "fake_nrt_live_tensors");
  fake.last_export = must_find<fake_nrt_last_export_fn>(handle, path, "fake_nrt_last_export");
  fake.set_export_gives_no_fd = must_find<fake_nrt_set_export_gives_no_fd_fn>(
      handle, path, "fake_nrt_set_export_gives_no_fd");
  fake.handle = handle;
  return fake;  // the handle stays open for the life of the process, on purpose
}

}  // namespace

const char* fake_nrt_path() { return HMR_FAKE_NRT_PATH; }
const char* fake_nrt_v1_path() { return HMR_FAKE_NRT_V1_PATH; }

const FakeNrt& fake_nrt(const char* path) {
  static const FakeNrt with_v2 = load(fake_nrt_path());
  static const FakeNrt v1_only = load(fake_nrt_v1_path());
  if (std::strcmp(path, fake_nrt_path()) == 0) return with_v2;
  if (std::strcmp(path, fake_nrt_v1_path()) == 0) return v1_only;
  std::fprintf(stderr, "no fake Neuron runtime at %s\n", path);
  std::abort();
}

void* app_tensor_allocate(const FakeNrt& fake, int vnc, size_t size, void** tensor) {
  auto allocate = must_find<TensorAllocateFn>(fake.handle, "fake nrt", "nrt_tensor_allocate");
  auto get_va = must_find<TensorGetVaFn>(fake.handle, "fake nrt", "nrt_tensor_get_va");
  *tensor = nullptr;
  if (allocate(/*DEVICE*/ 0, vnc, size, "app", tensor) != 0) return nullptr;
  return get_va(*tensor);
}

void app_tensor_free(const FakeNrt& fake, void* tensor) {
  must_find<TensorFreeFn>(fake.handle, "fake nrt", "nrt_tensor_free")(&tensor);
}

}  // namespace hmr::testing
