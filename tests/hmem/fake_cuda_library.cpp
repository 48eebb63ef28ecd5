#include "tests/hmem/fake_cuda_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace hmr::testing {
namespace {

template <typename Fn>
Fn must_find(void* handle, const char* name) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake CUDA driver %s lacks %s\n", fake_cuda_path(), name);
    std::abort();
  }
  return reinterpret_cast<Fn>(address);
}

FakeCuda load() {
  // The same path the iface opens through HMR_CUDA_LIBRARY, so dlopen returns the same object.
  void* handle = dlopen(fake_cuda_path(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load the fake CUDA driver: %s\n", dlerror());
    std::abort();
  }
  FakeCuda fake;
  fake.reset = must_find<fake_cuda_reset_fn>(handle, "fake_cuda_reset");
  fake.alloc = must_find<fake_cuda_alloc_fn>(handle, "fake_cuda_alloc");
  fake.free = must_find<fake_cuda_free_fn>(handle, "fake_cuda_free");
  fake.set_failure = must_find<fake_cuda_set_failure_fn>(handle, "fake_cuda_set_failure");
  fake.set_device_attribute =
      must_find<fake_cuda_set_device_attribute_fn>(handle, "fake_cuda_set_device_attribute");
  fake.call_count = must_find<fake_cuda_call_count_fn>(handle, "fake_cuda_call_count");
  fake.last_export = must_find<fake_cuda_last_export_fn>(handle, "fake_cuda_last_export");
  return fake;  // the handle stays open for the life of the process, on purpose
}

}  // namespace

const char* fake_cuda_path() { return HMR_FAKE_CUDA_PATH; }

const FakeCuda& fake_cuda() {
  static const FakeCuda fake = load();
  return fake;
}

int open_fd_count() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

}  // namespace hmr::testing
