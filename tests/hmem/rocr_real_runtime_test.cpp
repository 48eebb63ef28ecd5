// The ROCr iface against the real runtime, where one is installed (libhsa-runtime64.so.1).
//
// Without an AMD GPU (no /dev/kfd) the runtime must fail closed with its own words; with one,
// the iface must find, allocate, describe and copy real memory.  Skipped where the runtime is
// not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "rocr/rocr_iface.h"
#include "tests/hmem/real_library.h"

namespace hmr::rocr {
namespace {

std::string real_library_unavailable() {
  return hmr::testing::real_library_unavailable("HMR_ROCR_LIBRARY", kRocrDefaultLibrary,
                                                "fake_hsa_reset");
}

bool have_amd_gpu() { return access("/dev/kfd", F_OK) == 0; }

TEST(RocrRealRuntime, WithoutAGpuInitFailsClosedWithTheRuntimesReason) {
  const std::string why = real_library_unavailable();
  if (!why.empty()) GTEST_SKIP() << "the real ROCr runtime cannot be used: " << why;
  if (have_amd_gpu()) GTEST_SKIP() << "this machine has /dev/kfd; the GPU test covers it";

  RocrIface iface;
  Status status = iface.init();
  ASSERT_FALSE(status.ok());
  // hsa_init answers HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008) when it finds no GPU to open.
  EXPECT_EQ(status.code(), HMR_ENODEV) << status.reason();
  EXPECT_NE(status.reason().find("rocr iface unavailable: hsa_init()"), std::string::npos)
      << status.reason();
  EXPECT_NE(status.reason().find(kRocrDefaultLibrary), std::string::npos);
  EXPECT_NE(status.reason().find("HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008"), std::string::npos);
  EXPECT_NE(status.reason().find("/dev/kfd does not exist"), std::string::npos);
  EXPECT_TRUE(iface.library_path().empty());

  // Fail closed: memory is never called "host" because the runtime is unusable.
  std::vector<char> host(64);
  Result<hmem::PointerInfo> info = iface.query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().code(), HMR_ENOENT);
}

TEST(RocrRealRuntime, OnAGpuDeviceMemoryIsFoundAndCopied) {
  const std::string why = real_library_unavailable();
  if (!why.empty()) GTEST_SKIP() << "the real ROCr runtime cannot be used: " << why;
  if (!have_amd_gpu()) GTEST_SKIP() << "no AMD GPU here (/dev/kfd is missing)";

  RocrIface iface;
  Status status = iface.init();
  ASSERT_TRUE(status.ok()) << status.reason();
  ASSERT_GE(*iface.device_count(), 1);
  Result<void*> device = iface.mem_alloc(hmem::DeviceId{0}, 1 << 20, hmem::MemoryKind::device_only);
  ASSERT_TRUE(device.ok()) << device.status().reason();
  Result<hmem::PointerInfo> info = iface.query(static_cast<char*>(*device) + 4096, 4096);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, hmem::MemoryKind::device_only);
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(*device));

  std::vector<char> out(4096, 'r');
  std::vector<char> back(out.size());
  ASSERT_TRUE(iface.copy_to_device(*device, out.data(), out.size()).ok());
  ASSERT_TRUE(iface.copy_from_device(back.data(), *device, back.size()).ok());
  EXPECT_EQ(back, out);
  EXPECT_TRUE(iface.mem_free(*device).ok());
}

}  // namespace
}  // namespace hmr::rocr
