// The set-up the Level Zero iface tests share: the fake loader reached through HMR_ZE_LIBRARY
// (as a user points hmr at a loader), an iface not yet initialised, and the memory a test
// allocated as the application would, freed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "tests/hmem/ze_fake_library.h"
#include "ze/ze_iface.h"

namespace hmr::testing {

class ZeIfaceFixture : public ::testing::Test {
 protected:
  virtual const FakeZe& fake() const { return fake_ze(); }

  void SetUp() override {
    setenv("HMR_ZE_LIBRARY", fake().path, 1);
    fake().reset();
    iface_ = std::make_unique<ze::ZeIface>();
  }
  void TearDown() override {
    close_iface();
    fake().reset();  // no failure a test set outlives it
    unsetenv("HMR_ZE_LIBRARY");
  }

  void init() {
    const Status started = iface_->init();
    ASSERT_TRUE(started.ok()) << started.reason();
  }
  void close_iface() {
    for (void* ptr : allocations_) fake().free(ptr);
    allocations_.clear();
    iface_.reset();
  }

  // Allocated as the application would, in a context of its own.
  void* alloc(int driver, int device, size_t size, int memory = FAKE_ZE_MEM_DEVICE) {
    void* ptr = nullptr;
    EXPECT_EQ(fake().alloc(driver, device, size, memory, &ptr), 0);
    allocations_.push_back(ptr);
    return ptr;
  }
  void free_allocation(void* ptr) {
    EXPECT_EQ(fake().free(ptr), 0);
    std::erase(allocations_, ptr);
  }

  std::unique_ptr<ze::ZeIface> iface_;
  std::vector<void*> allocations_;
};

}  // namespace hmr::testing
