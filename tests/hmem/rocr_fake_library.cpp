#include "tests/hmem/rocr_fake_library.h"

#include "tests/hmem/fake_library.h"

namespace hmr::testing {
namespace {

FakeHsa load(const char* path) {
  const FakeLibrary library("fake ROCr runtime", path);
  FakeHsa fake;
  fake.path = path;
  fake.reset = library.function<fake_hsa_reset_fn>("fake_hsa_reset");
  fake.alloc = library.function<fake_hsa_alloc_fn>("fake_hsa_alloc");
  fake.free = library.function<fake_hsa_free_fn>("fake_hsa_free");
  fake.read = library.function<fake_hsa_read_fn>("fake_hsa_read");
  fake.set_failure = library.function<fake_hsa_set_failure_fn>("fake_hsa_set_failure");
  fake.set_failure_once =
      library.function<fake_hsa_set_failure_once_fn>("fake_hsa_set_failure_once");
  fake.call_count = library.function<fake_hsa_call_count_fn>("fake_hsa_call_count");
  fake.init_count = library.function<fake_hsa_init_count_fn>("fake_hsa_init_count");
  fake.notifier_count = library.function<fake_hsa_notifier_count_fn>("fake_hsa_notifier_count");
  fake.set_gpu_count = library.function<fake_hsa_set_gpu_count_fn>("fake_hsa_set_gpu_count");
  fake.set_dmabuf_supported =
      library.function<fake_hsa_set_dmabuf_supported_fn>("fake_hsa_set_dmabuf_supported");
  fake.last_export = library.function<fake_hsa_last_export_fn>("fake_hsa_last_export");
  fake.allowed_agents = library.function<fake_hsa_allowed_agents_fn>("fake_hsa_allowed_agents");
  fake.import = library.function<fake_hsa_import_fn>("fake_hsa_import");
  fake.reserve = library.function<fake_hsa_reserve_fn>("fake_hsa_reserve");
  fake.runtime_crashes = library.function<fake_hsa_runtime_crashes_fn>("fake_hsa_runtime_crashes");
  return fake;
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
