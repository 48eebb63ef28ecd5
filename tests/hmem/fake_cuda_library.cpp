#include "tests/hmem/fake_cuda_library.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "hmem/symbol_table.h"
#include "tests/hmem/fake_library.h"

namespace hmr::testing {
namespace {

FakeCuda load() {
  const FakeLibrary library("fake CUDA driver", fake_cuda_path());
  FakeCuda fake;
  fake.reset = library.function<fake_cuda_reset_fn>("fake_cuda_reset");
  fake.alloc = library.function<fake_cuda_alloc_fn>("fake_cuda_alloc");
  fake.alloc_pooled = library.function<fake_cuda_alloc_pooled_fn>("fake_cuda_alloc_pooled");
  fake.free = library.function<fake_cuda_free_fn>("fake_cuda_free");
  fake.set_failure = library.function<fake_cuda_set_failure_fn>("fake_cuda_set_failure");
  fake.set_device_attribute =
      library.function<fake_cuda_set_device_attribute_fn>("fake_cuda_set_device_attribute");
  fake.call_count = library.function<fake_cuda_call_count_fn>("fake_cuda_call_count");
  fake.last_export = library.function<fake_cuda_last_export_fn>("fake_cuda_last_export");
  fake.peek = library.function<fake_cuda_peek_fn>("fake_cuda_peek");
  fake.poke = library.function<fake_cuda_poke_fn>("fake_cuda_poke");
  fake.host_registration_count =
      library.function<fake_cuda_host_registration_count_fn>("fake_cuda_host_registration_count");
  fake.primary_retains =
      library.function<fake_cuda_primary_retains_fn>("fake_cuda_primary_retains");
  fake.set_failure_once =
      library.function<fake_cuda_set_failure_once_fn>("fake_cuda_set_failure_once");
  fake.vmm_live = library.function<fake_cuda_vmm_live_fn>("fake_cuda_vmm_live");
  fake.current_context_device =
      library.function<fake_cuda_current_context_device_fn>("fake_cuda_current_context_device");
  return fake;
}

}  // namespace

const char* fake_cuda_path() { return HMR_FAKE_CUDA_PATH; }

const FakeCuda& fake_cuda() {
  static const FakeCuda fake = load();
  return fake;
}

const cuda::CudaSymbols& fake_cuda_driver() {
  // Kept loaded for the life of the process, like fake_cuda()'s library.
  static const std::optional<hmem::SymbolTable> table = [] {
    Result<hmem::SymbolTable> loaded =
        hmem::SymbolTable::load("FAKE_CUDA_DRIVER", fake_cuda_path(), cuda::cuda_symbol_specs());
    if (!loaded.ok()) {
      std::fprintf(stderr, "cannot bind the fake CUDA driver: %s\n",
                   loaded.status().reason().c_str());
      std::abort();
    }
    return std::optional<hmem::SymbolTable>(std::move(*loaded));
  }();
  static const cuda::CudaSymbols symbols = [] {
    cuda::CudaSymbols bound;
    cuda::bind_cuda_symbols(*table, bound);
    return bound;
  }();
  return symbols;
}

void FakeCudaTest::SetUp() {
  setenv("HMR_CUDA_LIBRARY", fake_cuda_path(), 1);
  fake_cuda().reset();
}

void FakeCudaTest::TearDown() {
  for (unsigned long long ptr : allocations_) fake_cuda().free(ptr);
  unsetenv("HMR_CUDA_LIBRARY");
}

unsigned long long FakeCudaTest::alloc(int device, size_t size, int memory) {
  unsigned long long ptr = 0;
  EXPECT_EQ(fake_cuda().alloc(device, size, memory, &ptr), 0);
  allocations_.push_back(ptr);
  return ptr;
}

void FakeCudaTest::free_allocation(unsigned long long ptr) {
  EXPECT_EQ(fake_cuda().free(ptr), 0);
  std::erase(allocations_, ptr);
}

}  // namespace hmr::testing
