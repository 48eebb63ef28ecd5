// The C++ wrapper's device-memory parts (include/hmr/hmr.hpp) on the fake CUDA driver.
#include <hmr/hmr.hpp>

#include <cstring>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

TEST(HmemCppWrapper, DeviceMemoryQueriesRegistrationAndSync) {
  hmr::DeviceMemory device(HMR_HMEM_CUDA, 0, 64 * 1024, HMR_MEM_DEVICE_ONLY);
  ASSERT_NE(device.get(), nullptr);
  const hmr::MemoryType type = hmr::detect_memory_type(device.get(), 1);
  EXPECT_EQ(type.iface, HMR_HMEM_CUDA);
  EXPECT_EQ(type.kind, HMR_MEM_DEVICE_ONLY);
  const hmr_mem_attr attr = hmr::mem_query(device.get(), 16, HMR_MEM_ATTR_SYS_DEV);
  EXPECT_EQ(attr.base, device.get());
  EXPECT_STREQ(attr.sys_dev, "0000:17:00.0");

  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  hmr::DomainOptions options;
  options.mr_mode = kSharingMode;
  options.flags = HMR_DOMAIN_ALLOW_HMEM_COPY;
  hmr::Domain domain(options);
  auto mr = hmr::MemoryRegion::reg(domain, device.get(), 4096, kAccess);
  const hmr_mr_info info = mr.info();
  ASSERT_EQ(info.path, HMR_MR_PATH_HOST_SHADOW);
  std::memset(info.shadow, 0x42, 4096);
  mr.sync(HMR_SYNC_TO_DEVICE);
  std::vector<uint8_t> seen(4096);
  ASSERT_EQ(fake_cuda().peek(reinterpret_cast<uintptr_t>(device.get()), seen.data(), seen.size()),
            0);
  EXPECT_EQ(seen, std::vector<uint8_t>(4096, 0x42));
  domain.invalidate(device.get(), 4096);
  mr.close();
  device.free();
  EXPECT_EQ(device.get(), nullptr);
}

TEST(HmemCppWrapper, FailuresThrowWithTheReason) {
  try {
    hmr::DeviceMemory bad(HMR_HMEM_SYSTEM, 0, 4096, HMR_MEM_DEVICE_ONLY);
    FAIL() << "system memory cannot be device-only";
  } catch (const hmr::Error& error) {
    EXPECT_EQ(error.code(), HMR_EINVAL);
    EXPECT_NE(std::string(error.what()).find("hmr_mem_alloc"), std::string::npos);
  }
  EXPECT_THROW(hmr::mem_query(nullptr, 1), hmr::Error);
  EXPECT_THROW(hmr::invalidate(nullptr, 1), hmr::Error);
}

}  // namespace
}  // namespace hmr_hmem_test
