#include "tests/hmem/neuron_fake_library.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/hmem/fake_library.h"

namespace hmr::testing {
namespace {

FakeNrt load(const char* path) {
  const FakeLibrary library("fake Neuron runtime", path);
  FakeNrt fake;
  fake.reset = library.function<fake_nrt_reset_fn>("fake_nrt_reset");
  fake.set_failure = library.function<fake_nrt_set_failure_fn>("fake_nrt_set_failure");
  fake.call_count = library.function<fake_nrt_call_count_fn>("fake_nrt_call_count");
  fake.live_tensors = library.function<fake_nrt_live_tensors_fn>("fake_nrt_live_tensors");
  fake.last_export = library.function<fake_nrt_last_export_fn>("fake_nrt_last_export");
  fake.set_export_gives_no_fd =
      library.function<fake_nrt_set_export_gives_no_fd_fn>("fake_nrt_set_export_gives_no_fd");
  fake.application_init = library.function<FakeNrt::InitFn>("nrt_init");
  fake.tensor_allocate = library.function<FakeNrt::TensorAllocateFn>("nrt_tensor_allocate");
  fake.tensor_get_va = library.function<FakeNrt::TensorGetVaFn>("nrt_tensor_get_va");
  fake.tensor_free = library.function<FakeNrt::TensorFreeFn>("nrt_tensor_free");
  return fake;
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
  *tensor = nullptr;
  if (fake.tensor_allocate(/*DEVICE*/ 0, vnc, size, "app", tensor) != 0) return nullptr;
  return fake.tensor_get_va(*tensor);
}

void app_tensor_free(const FakeNrt& fake, void* tensor) { fake.tensor_free(&tensor); }

}  // namespace hmr::testing
