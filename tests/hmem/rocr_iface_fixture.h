// The set-up the ROCr iface tests share: the fake runtime reached through HMR_ROCR_LIBRARY (as
// a user points hmr at a runtime), a kernel configuration with both dma-buf options on (so
// exports are allowed unless a test says otherwise), an iface not yet initialised, and the
// memory a test allocated as the application would, freed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "rocr/rocr_iface.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_temp_file.h"

namespace hmr::testing {

class RocrIfaceFixture : public ::testing::Test {
 protected:
  virtual const FakeHsa& fake() const { return fake_hsa(); }

  void SetUp() override {
    setenv("HMR_ROCR_LIBRARY", fake().path, 1);
    fake().reset();
    iface_ = new_iface();
  }
  void TearDown() override {
    close_iface();
    fake().reset();  // no failure a test set outlives it
    unsetenv("HMR_ROCR_LIBRARY");
  }

  std::unique_ptr<rocr::RocrIface> new_iface() const {
    return std::make_unique<rocr::RocrIface>(
        rocr::KernelConfigSources{config_.path(), "/nonexistent"});
  }
  void init() {
    const Status started = iface_->init();
    ASSERT_TRUE(started.ok()) << started.reason();
  }
  // Frees what the test allocated, then the iface (hmr's watches go before the memory would).
  void close_iface() {
    for (void* ptr : allocations_) fake().free(ptr);
    allocations_.clear();
    iface_.reset();
  }

  // Memory of GPU `gpu` (-1: the CPU's system pool) as the application allocates it.
  void* alloc(int gpu, size_t size) {
    void* ptr = nullptr;
    EXPECT_EQ(fake().alloc(gpu, size, &ptr), 0);
    allocations_.push_back(ptr);
    return ptr;
  }
  void free_allocation(void* ptr) {
    EXPECT_EQ(fake().free(ptr), 0);
    std::erase(allocations_, ptr);
  }

  TempFile config_{"iface-config",
                   "CONFIG_PCI=y\nCONFIG_DMABUF_MOVE_NOTIFY=y\nCONFIG_PCI_P2PDMA=y\n"};
  std::unique_ptr<rocr::RocrIface> iface_;
  std::vector<void*> allocations_;
};

}  // namespace hmr::testing
