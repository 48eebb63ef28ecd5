// What the out-of-memory tests share: the mode their callback domains are opened in, the
// access they register with, and the page they register.
#pragma once

#include <hmr/hmr.h>

#include <cstddef>
#include <cstdint>

namespace hmr_test::out_of_memory {

constexpr uint64_t kAppMode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;
constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr size_t kPage = 4096;

}  // namespace hmr_test::out_of_memory
