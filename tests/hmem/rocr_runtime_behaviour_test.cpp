// The ROCr iface against what ROCR-Runtime really does, where an earlier fake shared hmr's
// assumptions (issue 33): imported (IPC) and graphics-interop memory has no region and must
// never reach the runtime's dma-buf export; pinned (LOCKED) memory gets no deallocation
// callback and no allocation id, so it must never look like the same allocation twice; and an
// address reservation (RESERVED_ADDR, hipMallocManaged on ROCm 7) is host memory, as UCX treats
// it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <memory>

#include "rocr/rocr_iface.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_iface_fixture.h"

namespace hmr::rocr {
namespace {

using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::FakeHsa;
using hmr::testing::fake_hsa;

class RocrRuntimeBehaviourTest : public hmr::testing::RocrIfaceFixture {
 protected:
  void SetUp() override {
    RocrIfaceFixture::SetUp();
    init();
  }

  static void no_op(void*, uint64_t, size_t) {}
};

TEST_F(RocrRuntimeBehaviourTest, ImportedAndGraphicsMemoryIsDeviceMemoryButNeverExported) {
  for (int type : {FAKE_HSA_TYPE_IPC, FAKE_HSA_TYPE_GRAPHICS}) {
    void* imported = nullptr;
    ASSERT_EQ(fake().import(1, type, 1 << 20, &imported), 0);
    Result<PointerInfo> info = iface_->query(static_cast<char*>(imported) + 64, 64);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->kind, MemoryKind::device_only);  // the CPU must still never touch it
    EXPECT_EQ(info->device.value, 1u);

    Result<DmabufExport> exported = iface_->export_dmabuf({imported, 4096});
    ASSERT_FALSE(exported.ok());
    EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP) << exported.status().reason();
    EXPECT_EQ(fake().runtime_crashes(), 0) << "hmr asked ROCr to export memory without a region";
    EXPECT_EQ(fake().free(imported), 0);
  }
}

// ROCr has no id and no callback for pinned memory: unlock, free, re-lock at the same address
// must not look like the allocation hmr saw before.
TEST_F(RocrRuntimeBehaviourTest, PinnedMemoryNeverRepeatsAnIdentity) {
  const size_t len = 1 << 16;
  void* host = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(host, MAP_FAILED);
  ASSERT_TRUE(iface_->host_register(host, len).ok());
  Result<PointerInfo> first = iface_->query(host, 64);
  ASSERT_TRUE(first.ok()) << first.status().reason();
  EXPECT_EQ(first->kind, MemoryKind::host_alloc);
  // Nothing to watch, and that is not a failure: the identity already never repeats.
  EXPECT_TRUE(iface_->watch_free(*first, &no_op, this).ok());
  ASSERT_TRUE(iface_->host_unregister(host).ok());
  ASSERT_TRUE(iface_->host_register(host, len).ok());
  Result<PointerInfo> again = iface_->query(host, 64);
  ASSERT_TRUE(again.ok()) << again.status().reason();
  EXPECT_NE(again->alloc_id, first->alloc_id) << "a stale cached registration could hit";
  EXPECT_NE(again->alloc_id, 0u);
  ASSERT_TRUE(iface_->host_unregister(host).ok());
  munmap(host, len);
}

// Memory-pool allocations keep what they had: no id, a real free callback.
TEST_F(RocrRuntimeBehaviourTest, PoolMemoryIsStillWatchedThroughItsCallback) {
  void* vram = nullptr;
  ASSERT_EQ(fake().alloc(0, 1 << 20, &vram), 0);
  Result<PointerInfo> info = iface_->query(vram, 64);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->alloc_id, 0u);
  EXPECT_TRUE(iface_->watch_free(*info, &no_op, this).ok());
  EXPECT_EQ(fake().notifier_count(), 1);
  EXPECT_TRUE(iface_->unwatch_free(*info, this).ok());
  EXPECT_EQ(fake().free(vram), 0);
}

TEST_F(RocrRuntimeBehaviourTest, AReservedAddressIsHostMemoryAsUcxTreatsIt) {
  void* reserved = nullptr;
  ASSERT_EQ(fake().reserve(1 << 20, &reserved), 0);
  Result<PointerInfo> info = iface_->query(reserved, 64);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT) << info.status().reason();
  EXPECT_EQ(fake().free(reserved), 0);
}

}  // namespace
}  // namespace hmr::rocr
