// The CUDA contexts hmr runs copies, allocations and host registrations in.
//
// cuPointerGetAttributes needs no context; cuMemcpy*, cuMemAlloc* and cuMemHostRegister act in
// the calling thread's current one, and cuMemGetAddressRange and cuMemGetHandleForAddressRange
// fail without one.  hmr uses each device's primary context (the one the CUDA runtime, PyTorch
// and NCCL share) and never leaves its own choice behind on the caller's thread: the previous
// current context is restored after every call.
#pragma once

#include <atomic>
#include <memory>

#include "cuda/cuda_symbols.h"
#include "util/status.h"

namespace hmr::cuda {

// Retains each device's primary context once, on first use, and releases it on destruction.
// Retained for the iface's life rather than per call: releasing the last retain destroys the
// context and frees every allocation made in it, including memory hmr's mem_alloc handed out.
class PrimaryContexts {
 public:
  PrimaryContexts() = default;
  PrimaryContexts(const PrimaryContexts&) = delete;
  PrimaryContexts& operator=(const PrimaryContexts&) = delete;
  ~PrimaryContexts() { release_all(); }

  // Forgets every retained context (releasing it) and prepares `device_count` empty slots.
  // Not thread-safe: called from init, before the iface is shared.
  void reset(const CudaSymbols* symbols, int device_count);

  // The primary context of `ordinal`, retained on first use.  Lock-free: two threads may both
  // retain; the loser gives its extra retain back, so the driver is never called under a lock.
  Result<CUcontext> get(int ordinal);

 private:
  void release_all();

  const CudaSymbols* symbols_ = nullptr;
  int device_count_ = 0;
  std::unique_ptr<std::atomic<CUcontext>[]> slots_;
};

// Makes `context` current on this thread and, on destruction, restores whatever was current
// before (possibly no context).  Skips both calls when `context` is already current.
class ScopedCurrentContext {
 public:
  static Result<ScopedCurrentContext> enter(const CudaSymbols& symbols, CUcontext context);
  // Leaves the thread's current context alone when it has one; otherwise makes the one
  // `fallback` gives current (called only then, so a primary context is retained only if used).
  template <typename Fallback>
  static Result<ScopedCurrentContext> ensure(const CudaSymbols& symbols, Fallback fallback) {
    CUcontext current = nullptr;
    const CUresult result = symbols.cuCtxGetCurrent(&current);
    if (result != CUDA_SUCCESS) return failed_get_current(symbols, result);
    if (current != nullptr) return ScopedCurrentContext(nullptr, nullptr);
    Result<CUcontext> context = fallback();
    if (!context.ok()) return context.status();
    return enter(symbols, *context);
  }

  ScopedCurrentContext(ScopedCurrentContext&& other) noexcept;
  ScopedCurrentContext& operator=(ScopedCurrentContext&&) = delete;
  ScopedCurrentContext(const ScopedCurrentContext&) = delete;
  ScopedCurrentContext& operator=(const ScopedCurrentContext&) = delete;
  ~ScopedCurrentContext();

 private:
  static Status failed_get_current(const CudaSymbols& symbols, CUresult result);
  ScopedCurrentContext(const CudaSymbols* symbols, CUcontext previous)
      : symbols_(symbols), previous_(previous) {}

  const CudaSymbols* symbols_;  // null: nothing to restore
  CUcontext previous_;
};

}  // namespace hmr::cuda
