#include "cuda/cuda_context.h"

#include <utility>

#include "cuda/cuda_error.h"
#include "util/log.h"

namespace hmr::cuda {

void PrimaryContexts::reset(const CudaSymbols* symbols, int device_count) {
  release_all();
  symbols_ = symbols;
  device_count_ = device_count;
  slots_ = std::make_unique<std::atomic<CUcontext>[]>(static_cast<size_t>(device_count));
  for (int i = 0; i < device_count; ++i) slots_[static_cast<size_t>(i)].store(nullptr);
}

Result<CUcontext> PrimaryContexts::get(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count_) {
    return make_error(HMR_EINVAL, "cuda device %d does not exist (this process sees %d)", ordinal,
                      device_count_);
  }
  std::atomic<CUcontext>& slot = slots_[static_cast<size_t>(ordinal)];
  CUcontext context = slot.load(std::memory_order_acquire);
  if (context != nullptr) return context;

  CUdevice device = 0;
  // The reason names the call that failed: "cannot retain" alone sent readers to the retain
  // when the device lookup had failed, and named neither entry point.
  const char* call = "cuDeviceGet";
  CUresult result = symbols_->cuDeviceGet(&device, ordinal);
  if (result == CUDA_SUCCESS) {
    call = "cuDevicePrimaryCtxRetain";
    result = symbols_->cuDevicePrimaryCtxRetain(&context, device);
  }
  if (result != CUDA_SUCCESS || context == nullptr) {
    return make_error(result != CUDA_SUCCESS ? hmr_code_for(result) : HMR_EIO,
                      "cannot retain the primary context of cuda device %d: %s failed: %s",
                      ordinal, call,
                      result != CUDA_SUCCESS ? describe_cuda_error(*symbols_, result).c_str()
                                             : "the driver returned no context");
  }
  CUcontext expected = nullptr;
  if (!slot.compare_exchange_strong(expected, context, std::memory_order_acq_rel)) {
    // Another thread retained it first; the primary context is one per device, so this retain
    // is a duplicate count and is handed back.
    (void)symbols_->cuDevicePrimaryCtxRelease(device);
    return expected;
  }
  return context;
}

void PrimaryContexts::release_all() {
  if (symbols_ == nullptr) return;
  for (int ordinal = 0; ordinal < device_count_; ++ordinal) {
    if (slots_[static_cast<size_t>(ordinal)].exchange(nullptr) == nullptr) continue;
    CUdevice device = 0;
    CUresult result = symbols_->cuDeviceGet(&device, ordinal);
    if (result == CUDA_SUCCESS) result = symbols_->cuDevicePrimaryCtxRelease(device);
    // At process exit the driver may already be torn down (DEINITIALIZED): nothing to undo.
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_DEINITIALIZED) {
      log_message(LogLevel::warn, "cuda: releasing the primary context of device %d failed: %s",
                  ordinal, describe_cuda_error(*symbols_, result).c_str());
    }
  }
  symbols_ = nullptr;
  device_count_ = 0;
  slots_.reset();
}

Result<ScopedCurrentContext> ScopedCurrentContext::enter(const CudaSymbols& symbols,
                                                         CUcontext context) {
  CUcontext previous = nullptr;
  CUresult result = symbols.cuCtxGetCurrent(&previous);
  if (result != CUDA_SUCCESS) return failed_get_current(symbols, result);
  if (previous == context) return ScopedCurrentContext(nullptr, nullptr);
  result = symbols.cuCtxSetCurrent(context);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result), "cuCtxSetCurrent failed: %s",
                      describe_cuda_error(symbols, result).c_str());
  }
  return ScopedCurrentContext(&symbols, previous);
}

Status ScopedCurrentContext::failed_get_current(const CudaSymbols& symbols, CUresult result) {
  return make_error(hmr_code_for(result), "cuCtxGetCurrent failed: %s",
                    describe_cuda_error(symbols, result).c_str());
}

ScopedCurrentContext::ScopedCurrentContext(ScopedCurrentContext&& other) noexcept
    : symbols_(std::exchange(other.symbols_, nullptr)), previous_(other.previous_) {}

ScopedCurrentContext::~ScopedCurrentContext() {
  if (symbols_ == nullptr) return;
  const CUresult result = symbols_->cuCtxSetCurrent(previous_);
  if (result != CUDA_SUCCESS) {
    log_message(LogLevel::warn, "cuda: restoring the caller's current context failed: %s",
                describe_cuda_error(*symbols_, result).c_str());
  }
}

}  // namespace hmr::cuda
