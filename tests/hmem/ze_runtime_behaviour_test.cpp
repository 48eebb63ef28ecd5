// The Level Zero iface against what the Intel driver (intel/compute-runtime) really does, where
// an earlier fake shared hmr's assumptions (issue 33): the exported dma-buf fd belongs to the
// driver, small allocations of a one-device driver come from a pool whose whole buffer is the
// export, and memory placed on a tile names a sub-device zeDeviceGet never lists.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/hmem/ze_fake_library.h"
#include "tests/hmem/ze_iface_fixture.h"
#include "ze/ze_iface.h"

namespace hmr::ze {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::PointerInfo;
using hmr::testing::FakeZe;
using hmr::testing::fake_ze;

constexpr DeviceId kDriver0Device0{0x0};

bool fd_is_open(int fd) { return fd >= 0 && fcntl(fd, F_GETFD) != -1; }

class ZeRuntimeBehaviourTest : public hmr::testing::ZeIfaceFixture {
 protected:
  void SetUp() override {
    ZeIfaceFixture::SetUp();
    init();
  }
};

// NEO returns the same cached fd on every export of an allocation and closes it at zeMemFree;
// hmr must hold a descriptor of its own and leave the driver's open.
TEST_F(ZeRuntimeBehaviourTest, TheDriversExportedFdIsNeverClosedNorHandedOut) {
  void* base = alloc(1, 0, 1 << 20);
  int driver_fd = -1;
  for (int round = 0; round < 3; ++round) {
    Result<DmabufExport> exported = iface_->export_dmabuf({base, 4096});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    driver_fd = fake().driver_export_fd(base);
    ASSERT_TRUE(fd_is_open(driver_fd));
    EXPECT_NE(exported->fd.get(), driver_fd) << "hmr's export must own a descriptor of its own";
    EXPECT_EQ(exported->exported_len, size_t{1} << 20);
  }  // each export's fd is closed here: the driver's must survive it
  EXPECT_TRUE(fd_is_open(driver_fd)) << "hmr closed the driver's cached dma-buf fd";
  EXPECT_EQ(fake().driver_export_fd(base), driver_fd);  // the same number every time
}

// A pooled sub-allocation exports the pool's whole buffer: the offset is from the pool's start,
// not from the sub-allocation zeMemGetAddressRange reports.
TEST_F(ZeRuntimeBehaviourTest, APooledAllocationsOffsetIsFromThePoolsStart) {
  auto* first = static_cast<char*>(alloc(1, 0, 4096));
  auto* second = static_cast<char*>(alloc(1, 0, 8192));
  ASSERT_EQ(second, first + 4096) << "the fake should pool both";
  std::vector<char> ones(4096, 0x11), pattern(8192);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(iface_->copy_to_device(first, ones.data(), ones.size()).ok());
  ASSERT_TRUE(iface_->copy_to_device(second, pattern.data(), pattern.size()).ok());

  Result<PointerInfo> info = iface_->query(second + 100, 16);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(second));  // the sub-allocation
  EXPECT_EQ(info->alloc_len, 8192u);

  Result<DmabufExport> exported = iface_->export_dmabuf({second + 100, 64});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->exported_len, size_t{FAKE_ZE_POOL_SIZE});
  EXPECT_EQ(exported->offset, 4096u + 100u);
  std::vector<char> seen(64);
  ASSERT_EQ(pread(exported->fd.get(), seen.data(), seen.size(),
                  static_cast<off_t>(exported->offset)),
            64);
  EXPECT_EQ(std::memcmp(seen.data(), pattern.data() + 100, seen.size()), 0)
      << "the NIC would read other bytes than the registered ones";
}

// The free space of a USM pool belongs to the pool's buffer (zeMemGetAllocProperties answers
// device memory) but to no allocation: compute-runtime's zeMemGetAddressRange answers
// ADDRESS_NOT_FOUND.  A bad address, said so, and never host memory.
TEST_F(ZeRuntimeBehaviourTest, ThePoolsFreeSpaceIsABadAddressNamedAsSuch) {
  auto* first = static_cast<char*>(alloc(1, 0, 4096));
  Result<PointerInfo> info = iface_->query(first + 8 * 4096, 16);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EFAULT);
  EXPECT_NE(info.status().reason().find("ZE_RESULT_ERROR_ADDRESS_NOT_FOUND"), std::string::npos)
      << info.status().reason();
  EXPECT_NE(info.status().reason().find("no live allocation"), std::string::npos);
}

// The first allocation of a pool starts the pool; memory after it in the pool is still the
// pool's, and an allocation made with an export descriptor is never pooled (hmr's own).
TEST_F(ZeRuntimeBehaviourTest, AnAllocationAtThePoolsStartAndAnUnpooledOneExportAtTheirOffset) {
  auto* first = static_cast<char*>(alloc(1, 0, 4096));
  (void)alloc(1, 0, 4096);
  Result<DmabufExport> exported = iface_->export_dmabuf({first + 8, 8});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, 8u);

  Result<void*> own = iface_->mem_alloc(DeviceId{0x10000}, 4096, hmem::MemoryKind::device_only);
  ASSERT_TRUE(own.ok()) << own.status().reason();
  Result<DmabufExport> unpooled = iface_->export_dmabuf({static_cast<char*>(*own) + 16, 8});
  ASSERT_TRUE(unpooled.ok()) << unpooled.status().reason();
  EXPECT_EQ(unpooled->offset, 16u);
  EXPECT_LT(unpooled->exported_len, size_t{FAKE_ZE_POOL_SIZE});
  EXPECT_TRUE(iface_->mem_free(*own).ok());
}

// COMPOSITE hierarchy: memory on a tile reports the tile's sub-device handle.
TEST_F(ZeRuntimeBehaviourTest, MemoryOnATileBelongsToItsRootDevice) {
  void* on_tile = nullptr;
  ASSERT_EQ(fake().alloc_on_tile(1, 1 << 20, &on_tile), 0);
  Result<PointerInfo> info = iface_->query(on_tile, 64);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->device, kDriver0Device0);
  EXPECT_EQ(info->kind, hmem::MemoryKind::device_only);
  Result<DmabufExport> exported = iface_->export_dmabuf({on_tile, 64});
  EXPECT_TRUE(exported.ok()) << exported.status().reason();
}

}  // namespace
}  // namespace hmr::ze
