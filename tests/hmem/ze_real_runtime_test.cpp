// The Level Zero iface against the real loader, where one is installed (libze_loader.so.1).
//
// Without a Level Zero GPU driver the loader must fail closed with its own words; with one, the
// iface must find, allocate, describe and copy real memory.  Skipped where no loader is installed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "tests/hmem/real_library.h"
#include "ze/ze_iface.h"

namespace hmr::ze {
namespace {

std::string real_library_unavailable() {
  return hmr::testing::real_library_unavailable("HMR_ZE_LIBRARY", kZeDefaultLibrary,
                                                "fake_ze_reset");
}

TEST(ZeRealRuntime, InitFailsClosedOrFindsRealDevices) {
  const std::string why = real_library_unavailable();
  if (!why.empty()) GTEST_SKIP() << "the real Level Zero loader cannot be used: " << why;

  ZeIface iface;
  Status status = iface.init();
  if (!status.ok()) {
    // No driver behind the loader (this project's CI machine): zeInit answers 0x78000001.
    EXPECT_EQ(status.code(), HMR_ENODEV) << status.reason();
    EXPECT_NE(status.reason().find("ze iface unavailable: zeInit(ZE_INIT_FLAG_GPU_ONLY)"),
              std::string::npos)
        << status.reason();
    EXPECT_NE(status.reason().find(kZeDefaultLibrary), std::string::npos);
    EXPECT_NE(status.reason().find("ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)"),
              std::string::npos);
    EXPECT_TRUE(iface.library_path().empty());
    std::vector<char> host(64);
    Result<hmem::PointerInfo> info = iface.query(host.data(), host.size());
    ASSERT_FALSE(info.ok());
    EXPECT_NE(info.status().code(), HMR_ENOENT);  // never "host memory" by default
    return;
  }

  // A machine with a Level Zero GPU.
  Result<std::vector<ZeDeviceInfo>> devices = iface.devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_FALSE(devices->empty());
  const hmem::DeviceId first = devices->front().device;
  Result<void*> device = iface.mem_alloc(first, 1 << 20, hmem::MemoryKind::device_only);
  ASSERT_TRUE(device.ok()) << device.status().reason();
  Result<hmem::PointerInfo> info = iface.query(*device, 4096);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, hmem::MemoryKind::device_only);
  EXPECT_EQ(info->device, first);
  std::vector<char> out(4096, 'z');
  std::vector<char> back(out.size());
  ASSERT_TRUE(iface.copy_to_device(*device, out.data(), out.size()).ok());
  ASSERT_TRUE(iface.copy_from_device(back.data(), *device, back.size()).ok());
  EXPECT_EQ(back, out);
  EXPECT_TRUE(iface.mem_free(*device).ok());
}

}  // namespace
}  // namespace hmr::ze
