// Owner of one nrt tensor: frees it exactly once, with the runtime's nrt_tensor_free.
#pragma once

#include <utility>

#include "neuron/neuron_symbols.h"

namespace hmr::neuron {

class OwnedTensor {
 public:
  using FreeFn = void (*)(nrt_tensor_t**);

  OwnedTensor() = default;
  OwnedTensor(FreeFn free_fn, nrt_tensor_t* tensor) : free_fn_(free_fn), tensor_(tensor) {}
  OwnedTensor(OwnedTensor&& other) noexcept
      : free_fn_(other.free_fn_), tensor_(std::exchange(other.tensor_, nullptr)) {}
  OwnedTensor& operator=(OwnedTensor&& other) noexcept {
    if (this != &other) {
      reset();
      free_fn_ = other.free_fn_;
      tensor_ = std::exchange(other.tensor_, nullptr);
    }
    return *this;
  }
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  ~OwnedTensor() { reset(); }

  nrt_tensor_t* get() const { return tensor_; }

  void reset() {
    // nrt_tensor_free takes the address so it can null the caller's pointer.
    if (tensor_ != nullptr) free_fn_(&tensor_);
    tensor_ = nullptr;
  }

 private:
  FreeFn free_fn_ = nullptr;
  nrt_tensor_t* tensor_ = nullptr;
};

}  // namespace hmr::neuron
