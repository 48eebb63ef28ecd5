// The GPU lane through the public API: CUDA memory registered with hmr_mr_regattr
// (HMR_HMEM_CUDA) on the sim NIC, which records a device dma-buf without touching it.  After
// cuMemFree and a new allocation at the same address, a registration must miss the cache: the
// old entry names memory that no longer exists.
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <sys/uio.h>

#include <cstring>
#include <string>

#include "tests/api/test_support.h"
#include "tests/gpu/gpu_lane.h"

namespace hmr::cuda {
namespace {

using hmr::testing::as_device_pointer;
using hmr::testing::CudaGpuLane;

constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;

// Registers [address, +len) declared as CUDA memory of device 0; *mr set on success.
int register_cuda(hmr_domain* domain, CUdeviceptr address, size_t len, hmr_mr** mr) {
  const iovec segment = {as_device_pointer(address), len};
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.mr_iov = &segment;
  attr.iov_count = 1;
  attr.access = kAccess;
  attr.iface = HMR_HMEM_CUDA;
  attr.device.cuda = 0;
  return hmr_mr_regattr(domain, &attr, 0, mr);
}

using hmr_test::domain_stats;

// A domain on the sim NIC for CUDA memory of device 0; null with `why` set where the device
// cannot export dma-bufs (the test skips), null without it where the domain did not open.
hmr_test::DomainPtr dmabuf_domain(hmem::Iface& iface, std::string* why) {
  Result<hmem::DeviceCapabilities> caps = iface.capabilities(hmem::DeviceId{0});
  if (!caps.ok()) {  // a failure, not a skip
    ADD_FAILURE() << caps.status().reason();
    return nullptr;
  }
  if (!caps->dmabuf.supported) {
    *why = "device 0: " + caps->dmabuf.reason;
    return nullptr;
  }
  return hmr_test::open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL);
}

// Memory the NIC reaches itself has CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set once registered (the
// GPUDirect RDMA guide's step before pinning; CudaIface::order_copies_for_nic), read back
// from the real driver.
TEST_F(CudaGpuLane, MemoryRegisteredForTheNicHasSyncMemopsSet) {
  std::string why;
  hmr_test::DomainPtr domain = dmabuf_domain(iface(), &why);
  if (!domain && !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(domain) << hmr_last_error();
  CUdeviceptr memory = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&memory, 2 << 20));
  hmr_mr* mr = nullptr;
  ASSERT_EQ(register_cuda(domain.get(), memory, 65536, &mr), 0) << hmr_last_error();
  hmr_test::MrPtr registered(mr);
  unsigned int sync_memops = 0;
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_SYNC_MEMOPS;
  void* data[] = {&sync_memops};
  HMR_CU_ASSERT(driver().cuPointerGetAttributes(1, &attribute, data, memory));
  EXPECT_EQ(sync_memops, 1u);
  registered.reset();
  domain.reset();
  HMR_CU_ASSERT(driver().cuMemFree(memory));
}

TEST_F(CudaGpuLane, RegistrationAfterFreeAndReallocationIsNotAStaleHit) {
  std::string why;
  hmr_test::DomainPtr domain = dmabuf_domain(iface(), &why);
  if (!domain && !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(domain) << hmr_last_error();

  const size_t size = 2 << 20;
  CUdeviceptr first = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&first, size));
  hmr_mr* mr = nullptr;
  ASSERT_EQ(register_cuda(domain.get(), first, 65536, &mr), 0) << hmr_last_error();
  ASSERT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();  // its registration stays cached
  const hmr_domain_stats before = domain_stats(domain.get());
  HMR_CU_ASSERT(driver().cuMemFree(first));

  CUdeviceptr second = 0;
  HMR_CU_ASSERT(driver().cuMemAlloc(&second, size));
  if (second != first) {
    EXPECT_EQ(driver().cuMemFree(second), CUDA_SUCCESS);
    GTEST_SKIP() << "the driver did not hand the freed address out again; nothing to check";
  }
  mr = nullptr;
  const int rc = register_cuda(domain.get(), second, 65536, &mr);
  hmr_test::MrPtr again(mr);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  const hmr_domain_stats after = domain_stats(domain.get());
  EXPECT_EQ(after.cache_hits, before.cache_hits) << "a stale registration was handed out";
  EXPECT_EQ(after.cache_misses, before.cache_misses + 1);

  // The cache still works for the new allocation.
  mr = nullptr;
  EXPECT_EQ(register_cuda(domain.get(), second, 4096, &mr), 0) << hmr_last_error();
  hmr_test::MrPtr hit(mr);
  EXPECT_EQ(domain_stats(domain.get()).cache_hits, after.cache_hits + 1);
  hit.reset();
  again.reset();
  domain.reset();
  HMR_CU_ASSERT(driver().cuMemFree(second));
}

}  // namespace
}  // namespace hmr::cuda
