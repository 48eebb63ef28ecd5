#include "tests/gpu/gpu_lane.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "hmem/symbol_table.h"

namespace hmr::testing {
namespace {

using namespace hmr::cuda;

struct Lane {
  CudaIface iface;
  Status status;  // why the lane cannot run, when it cannot
  std::optional<hmem::SymbolTable> table;
  CudaSymbols driver;
  int devices = 0;
};

Lane& lane() {
  static Lane* shared = [] {
    unsetenv("HMR_CUDA_LIBRARY");  // the lane is about the real driver, found the usual way
    auto* state = new Lane;         // lives to process exit: the driver outlives every test
    state->status = state->iface.init();
    if (!state->status.ok()) return state;
    Result<hmem::SymbolTable> loaded =
        hmem::SymbolTable::load("CUDA", kCudaDefaultLibrary, cuda_symbol_specs());
    if (!loaded.ok()) {
      state->status = loaded.status();
      return state;
    }
    state->table.emplace(std::move(*loaded));
    bind_cuda_symbols(*state->table, state->driver);
    Result<int> count = state->iface.device_count();
    state->devices = count.ok() ? *count : 0;
    return state;
  }();
  return *shared;
}

bool lane_required() {
  const char* value = std::getenv("HMR_GPU_LANE_REQUIRE");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace

void CudaGpuLane::SetUp() {
  Lane& state = lane();
  std::string why;
  if (!state.status.ok()) {
    why = "no usable CUDA driver: " + state.status.reason();
  } else if (state.devices == 0) {
    why = "the CUDA driver sees no device";
  }
  if (!why.empty()) {
    if (lane_required()) FAIL() << why << " (HMR_GPU_LANE_REQUIRE=1)";
    GTEST_SKIP() << why;
  }
  HMR_CU_ASSERT(driver().cuDevicePrimaryCtxRetain(&context_, 0));
  HMR_CU_ASSERT(driver().cuCtxSetCurrent(context_));
}

void CudaGpuLane::TearDown() {
  if (context_ == nullptr) return;
  EXPECT_EQ(driver().cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(driver().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

CudaIface& CudaGpuLane::iface() { return lane().iface; }
const CudaSymbols& CudaGpuLane::driver() { return lane().driver; }
int CudaGpuLane::devices() { return lane().devices; }

bool CudaGpuLane::vmm_supported(int device, bool* gpu_direct_rdma) {
  int vmm = 0;
  int rdma = 0;
  if (driver().cuMemCreate == nullptr ||
      driver().cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                    device) != CUDA_SUCCESS ||
      driver().cuDeviceGetAttribute(
          &rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device) !=
          CUDA_SUCCESS) {
    return false;
  }
  *gpu_direct_rdma = rdma != 0;
  return vmm != 0;
}

std::optional<PoolCalls> pool_calls() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) {  // (the lane loaded it)
    ADD_FAILURE() << dlerror();
    return std::nullopt;
  }
  PoolCalls calls;
  auto find = [library](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(library, name));
    return slot != nullptr;
  };
  const bool all = find(calls.alloc_async, "cuMemAllocAsync") &&
                   find(calls.free_async, "cuMemFreeAsync") &&
                   find(calls.synchronize, "cuStreamSynchronize") &&
                   find(calls.default_pool, "cuDeviceGetDefaultMemPool") &&
                   find(calls.trim_to, "cuMemPoolTrimTo") &&
                   find(calls.set_attribute, "cuMemPoolSetAttribute") &&
                   find(calls.get_attribute, "cuMemPoolGetAttribute");
  dlclose(library);  // (RTLD_NOLOAD: the driver stays loaded)
  if (!all) return std::nullopt;
  return calls;
}

}  // namespace hmr::testing
