// hmr_md_query's dmabuf_mem_types and peer_direct_mem_types: the device memory that reaches
// the NIC without a host shadow, on every device of its runtime, by each path, as a
// registration's export decision would find it (registration/export_policy.h).  On the fake
// CUDA driver, whose device 1 reports DMA_BUF_SUPPORTED 0 (tests/fakes/fake_cuda.c) and both
// devices GPU_DIRECT_RDMA_SUPPORTED 1; sim NICs import dma-bufs unless dmabuf=0 and register
// device addresses with peer_direct=1.
#include <cstdlib>
#include <string>

#include "tests/fakes/fake_cuda_control.h"
#include "tests/hmem/fake_library.h"
#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

constexpr uint64_t kCuda = HMR_HMEM_IFACE_BIT(HMR_HMEM_CUDA);
constexpr const char* kEveryDeviceExports = "HMR_TEST_EVERY_CUDA_DEVICE_EXPORTS";

hmr_md_attr md_of(hmr_domain* domain) {
  hmr_md_attr md{};
  md.size = sizeof md;
  EXPECT_EQ(hmr_md_query(domain, &md), 0) << hmr_last_error();
  return md;
}

// The dma-buf path needs every device to export: a caller asking before it registers cannot
// tell which device its buffers will be on.
TEST(DevicePaths, DmabufIsSaidOnlyWhereEveryDeviceExports) {
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const hmr_md_attr md = md_of(domain.get());
  ASSERT_NE(md.reg_mem_types & kCuda, 0u) << "the fake CUDA driver is not loaded";
  EXPECT_NE(md.flags & HMR_MD_FLAG_DMABUF, 0u) << "the sim NIC should import dma-bufs";
  EXPECT_EQ(md.dmabuf_mem_types & kCuda, 0u) << "device 1 cannot export dma-bufs";
  EXPECT_EQ(md.peer_direct_mem_types, 0u);
  // What registering on device 1 answers: no path.
  FakeAllocation on_device_1(1, 65536);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(domain.get(), on_device_1.get(), 4096, HMR_HMEM_SYSTEM, 0, 0,
                                 &mr),
                   HMR_EOPNOTSUPP);
}

TEST(DevicePaths, PeerDirectWhereTheNicRegistersDeviceAddresses) {
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  const hmr_md_attr md = md_of(domain.get());
  EXPECT_EQ(md.peer_direct_mem_types & kCuda, kCuda);
  EXPECT_EQ(md.dmabuf_mem_types & kCuda, 0u);
  // And registering on either device takes it.
  for (int device : {0, 1}) {
    FakeAllocation memory(device, 65536);
    hmr_mr* mr = nullptr;
    ASSERT_EQ(register_attr(domain.get(), memory.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr), 0)
        << hmr_last_error();
    const MrPtr owned(mr);
    if (device == 1) {
      EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_PEER_DIRECT);
    }
  }
}

TEST(DevicePaths, NoPathWithP2pDisabledOrANicWithoutEither) {
  {
    const ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");  // read per domain, at its open
    auto domain = open_domain("peer_direct=1");
    ASSERT_TRUE(domain);
    const hmr_md_attr md = md_of(domain.get());
    EXPECT_EQ(md.dmabuf_mem_types | md.peer_direct_mem_types, 0u);
  }
  auto domain = open_domain("dmabuf=0");
  ASSERT_TRUE(domain);
  const hmr_md_attr md = md_of(domain.get());
  EXPECT_EQ(md.dmabuf_mem_types | md.peer_direct_mem_types, 0u);
}

// A driver whose every device exports dma-bufs: the path is said, and FI_HMEM_CUDA_USE_DMABUF=0
// takes it away.  In a process of its own, whose fake driver says so of device 1 before hmr
// reads the devices' capabilities (once, when it loads the runtime).
TEST(DevicePaths, DmabufIsSaidWhereEveryDeviceExports) {
  const int status = hmr_test::run_self(
      {"--gtest_filter=DevicePaths.EveryDeviceExportsProcess", "--gtest_brief=1"},
      {std::string(kEveryDeviceExports) + "=1"});
  EXPECT_EQ(status, 0) << "the process's checks failed (its output is above)";
}

TEST(DevicePaths, EveryDeviceExportsProcess) {
  if (std::getenv(kEveryDeviceExports) == nullptr) GTEST_SKIP() << "runs in its own process only";
  const hmr::testing::FakeLibrary cuda("fake CUDA driver", HMR_FAKE_CUDA_PATH);
  cuda.function<fake_cuda_set_device_attribute_fn>("fake_cuda_set_device_attribute")(
      1, /*CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED*/ 124, 1);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  EXPECT_EQ(md_of(domain.get()).dmabuf_mem_types & kCuda, kCuda);
  const ScopedEnv no_dmabuf("FI_HMEM_CUDA_USE_DMABUF", "0");
  auto without = open_domain(nullptr);
  ASSERT_TRUE(without);
  EXPECT_EQ(md_of(without.get()).dmabuf_mem_types & kCuda, 0u);
}

}  // namespace
}  // namespace hmr_hmem_test
