#include "tests/hmem/fake_cuda_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "hmem/symbol_table.h"

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
  fake.peek = must_find<fake_cuda_peek_fn>(handle, "fake_cuda_peek");
  fake.poke = must_find<fake_cuda_poke_fn>(handle, "fake_cuda_poke");
  fake.host_registration_count = must_find<fake_cuda_host_registration_count_fn>(
      handle, "fake_cuda_host_registration_count");
  fake.primary_retains =
      must_find<fake_cuda_primary_retains_fn>(handle, "fake_cuda_primary_retains");
  fake.current_context_device = must_find<fake_cuda_current_context_device_fn>(
      handle, "fake_cuda_current_context_device");
  return fake;  // the handle stays open for the life of the process, on purpose
}

}  // namespace

const char* fake_cuda_path() { return HMR_FAKE_CUDA_PATH; }

const FakeCuda& fake_cuda() {
  static const FakeCuda fake = load();
  return fake;
}

const cuda::CudaSymbols& fake_cuda_driver() {
  // Kept loaded for the life of the process, like fake_cuda()'s handle.
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

int open_fd_count() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
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
