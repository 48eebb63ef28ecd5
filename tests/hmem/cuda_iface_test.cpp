// The CUDA iface against the fake driver (tests/fakes/fake_cuda.c), loaded the way a user points
// hmr at a driver: HMR_CUDA_LIBRARY.
#include "cuda/cuda_iface.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "hmem/page_range.h"
#include "tests/hmem/export_checks.h"
#include "tests/hmem/fake_cuda_library.h"

namespace hmr::cuda {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::as_pointer;
using hmr::testing::fake_cuda;
using hmr::testing::fake_cuda_path;
using hmr::testing::expect_exports_leak_no_fd;
using hmr::testing::open_fd_count;

constexpr int kInvalidValue = 1;
constexpr int kOutOfMemory = 2;
constexpr int kNoDevice = 100;
constexpr int kNotSupported = 801;

using CudaIfaceTest = hmr::testing::FakeCudaTest;

TEST_F(CudaIfaceTest, InitLoadsTheOverrideAndCountsDevices) {
  init();
  EXPECT_EQ(iface_.library_path(), fake_cuda_path());
  EXPECT_EQ(iface_.driver_version(), 12080);
  Result<int> count = iface_.device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_CUDA_DEVICE_COUNT);
  EXPECT_TRUE(iface_.init().ok());  // a second init is a no-op
  EXPECT_EQ(fake_cuda().call_count("cuInit"), 1);
}

TEST_F(CudaIfaceTest, QueryDescribesTheWholeAllocation) {
  init();
  const size_t size = (1u << 20) + 123;
  const unsigned long long base = alloc(1, size);
  Result<PointerInfo> info = iface_.query(as_pointer(base + 4096 + 7), 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_CUDA);
  EXPECT_EQ(info->device, DeviceId{1});
  EXPECT_EQ(info->base, base);
  EXPECT_EQ(info->alloc_len, size);
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_NE(info->alloc_id, 0u);
  EXPECT_EQ(info->sys_dev, "0000:65:00.0");
}

TEST_F(CudaIfaceTest, DevicesHaveDistinctRangesAndBufferIds) {
  init();
  const unsigned long long on0 = alloc(0, 4096);
  const unsigned long long on1 = alloc(1, 4096);
  EXPECT_NE(on0, on1);
  Result<PointerInfo> first = iface_.query(as_pointer(on0), 1);
  Result<PointerInfo> second = iface_.query(as_pointer(on1), 1);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->device, DeviceId{0});
  EXPECT_EQ(second->device, DeviceId{1});
  EXPECT_NE(first->alloc_id, second->alloc_id);
  EXPECT_EQ(first->sys_dev, "0000:17:00.0");
}

TEST_F(CudaIfaceTest, HostPointerIsNotCudaMemory) {
  init();
  std::vector<char> host(4096);
  Result<PointerInfo> info = iface_.query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT);
  EXPECT_NE(info.status().reason().find("not CUDA memory"), std::string::npos);
}

TEST_F(CudaIfaceTest, RangePastTheAllocationIsRejected) {
  init();
  const unsigned long long base = alloc(0, 8192);
  Result<PointerInfo> info = iface_.query(as_pointer(base + 4096), 8192);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_.query(as_pointer(base), 0).status().code(), HMR_EINVAL);
}

TEST_F(CudaIfaceTest, ReallocationAtTheSameAddressGetsANewBufferId) {
  init();
  const unsigned long long first = alloc(0, 1 << 16);
  Result<PointerInfo> before = iface_.query(as_pointer(first), 64);
  ASSERT_TRUE(before.ok());
  free_allocation(first);
  EXPECT_EQ(iface_.query(as_pointer(first), 64).status().code(), HMR_ENOENT);
  const unsigned long long second = alloc(0, 1 << 16);
  ASSERT_EQ(second, first);  // the fake reuses the lowest free address, as drivers often do
  Result<PointerInfo> after = iface_.query(as_pointer(second), 64);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->alloc_id, before->alloc_id);
}

TEST_F(CudaIfaceTest, ManagedAndHostAllocationsAreTold) {
  init();
  Result<PointerInfo> managed = iface_.query(as_pointer(alloc(0, 4096, FAKE_CUDA_MEM_MANAGED)), 8);
  ASSERT_TRUE(managed.ok());
  EXPECT_EQ(managed->kind, MemoryKind::managed);
  Result<PointerInfo> pinned = iface_.query(as_pointer(alloc(1, 4096, FAKE_CUDA_MEM_HOST)), 8);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->kind, MemoryKind::host_alloc);
}

TEST_F(CudaIfaceTest, ExportCoversWholePagesWithTheRightOffset) {
  init();
  const size_t page = hmem::host_page_size();
  const unsigned long long base = alloc(0, 16 * page);
  const unsigned long long address = base + 3 * page + 100;  // not page aligned
  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(address), 2 * page});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_TRUE(exported->fd.valid());
  EXPECT_EQ(exported->offset, 100u);
  EXPECT_EQ(exported->len, 2 * page);
  EXPECT_EQ(exported->exported_len, 3 * page);  // [3 pages + 100, 5 pages + 100) -> pages 3..5

  unsigned long long ptr = 0;
  size_t size = 0;
  unsigned long long flags = 0;
  fake_cuda().last_export(&ptr, &size, &flags);
  EXPECT_EQ(ptr, base + 3 * page);
  EXPECT_EQ(size, 3 * page);
  EXPECT_EQ(flags, CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE);  // accepted the first time
  EXPECT_EQ(fake_cuda().call_count("cuMemGetHandleForAddressRange"), 1);

  struct stat st {};
  ASSERT_EQ(fstat(exported->fd.get(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), 3 * page);  // the fd covers exactly those pages
}

// The real driver refuses cuMemGetAddressRange and cuMemGetHandleForAddressRange on a thread
// with no current context (an H100, driver 580: hmr-perftest's registrations of hmr_mem_alloc
// memory failed there), and the fake now does too.  A query needs none (pointer attributes
// alone); an export borrows the device's primary context for the call; either leaves the
// thread without a context, as it found it.
TEST_F(CudaIfaceTest, QueryAndExportWorkOnAThreadWithNoCurrentContext) {
  init();
  const size_t page = hmem::host_page_size();
  const unsigned long long base = alloc(1, 4 * page);
  ASSERT_EQ(fake_cuda().current_context_device(), -1);
  Result<PointerInfo> info = iface_.query(as_pointer(base + 100), page);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->base, base);
  EXPECT_EQ(info->alloc_len, 4 * page);  // the allocation, not its 2 MiB backing
  EXPECT_EQ(fake_cuda().call_count("cuMemGetAddressRange_v2"), 0);
  EXPECT_EQ(fake_cuda().primary_retains(1), 0);  // no context was needed
  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(base), 2 * page});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(fake_cuda().current_context_device(), -1);
  EXPECT_EQ(fake_cuda().primary_retains(1), 1);  // retained once, for the iface's life
  EXPECT_EQ(fake_cuda().primary_retains(0), 0);  // only the memory's device
}

// A driver without the MAPPING_BASE_ADDR/SIZE attributes refuses them with INVALID_VALUE: the
// iface falls back to cuMemGetAddressRange, in a borrowed context, for this and every later
// query, VMM segments included.
TEST_F(CudaIfaceTest, DriverWithoutMappingAttributesFallsBackToAddressRanges) {
  init();
  fake_cuda().set_failure("cuPointerGetAttributes:mapping", kInvalidValue);
  const size_t page = hmem::host_page_size();
  const unsigned long long base = alloc(0, 4 * page);
  for (int round = 0; round < 2; ++round) {
    Result<PointerInfo> info = iface_.query(as_pointer(base + 100), page);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->base, base);
    EXPECT_EQ(info->alloc_len, 4 * page);
    // The first refusal is final: the second round asks no mapping attributes even though the
    // driver would now answer them.
    fake_cuda().set_failure("cuPointerGetAttributes:mapping", 0);
  }
  EXPECT_EQ(fake_cuda().call_count("cuMemGetAddressRange_v2"), 2);
  EXPECT_EQ(fake_cuda().call_count("cuPointerGetAttributes"), 3);  // 2 type queries, 1 refused
  EXPECT_EQ(fake_cuda().current_context_device(), -1);
  EXPECT_EQ(fake_cuda().primary_retains(0), 1);
}

// Stream-ordered pool memory (cuMemAllocAsync): the driver reports the pool's 32 MiB chunk as
// the mapping, which the allocation straddles (an H100, driver 580: a 100 MiB allocation queried
// at +50 MiB had the mapping [0x304000000, +32 MiB)).  The allocation is still one segment: the
// same base, length and id from wherever it is asked, so every registration inside it shares one
// cache key and one dma-buf export.
TEST_F(CudaIfaceTest, PoolMemoryIsOneAllocationAcrossPoolChunks) {
  init();
  const size_t size = (72u << 20) + 4096;
  unsigned long long base = 0;
  ASSERT_EQ(fake_cuda().alloc_pooled(0, size, &base), 0);
  Result<PointerInfo> start = iface_.query(as_pointer(base), 4096);
  Result<PointerInfo> middle = iface_.query(as_pointer(base + (50u << 20)), 4096);
  Result<PointerInfo> across = iface_.query(as_pointer(base + (20u << 20)), 40u << 20);
  ASSERT_TRUE(start.ok() && middle.ok() && across.ok()) << middle.status().reason();
  for (const PointerInfo& info : {*start, *middle, *across}) {
    EXPECT_EQ(info.base, base);
    EXPECT_EQ(info.alloc_len, size);
    EXPECT_EQ(info.alloc_id, start->alloc_id);
  }
  EXPECT_EQ(fake_cuda().free(base), 0);
}

TEST_F(CudaIfaceTest, RejectedPcieFlagIsRetriedWithoutIt) {
  init();
  const unsigned long long base = alloc(0, 1 << 20);
  for (int rejection : {kInvalidValue, kNotSupported}) {
    const int calls = fake_cuda().call_count("cuMemGetHandleForAddressRange");
    fake_cuda().set_failure("cuMemGetHandleForAddressRange:pcie", rejection);
    Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(base), 4096});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    EXPECT_EQ(fake_cuda().call_count("cuMemGetHandleForAddressRange"), calls + 2) << rejection;
    unsigned long long ptr = 0;
    size_t size = 0;
    unsigned long long flags = ~0ull;
    fake_cuda().last_export(&ptr, &size, &flags);
    EXPECT_EQ(flags, 0u);
    EXPECT_EQ(ptr, base);
  }
}

TEST_F(CudaIfaceTest, OtherExportFailuresAreNotRetried) {
  init();
  const unsigned long long base = alloc(0, 1 << 20);
  fake_cuda().set_failure("cuMemGetHandleForAddressRange", kOutOfMemory);
  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(base), 4096});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_ENOMEM);
  EXPECT_NE(exported.status().reason().find("cuMemGetHandleForAddressRange"), std::string::npos);
  EXPECT_NE(exported.status().reason().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
  EXPECT_EQ(fake_cuda().call_count("cuMemGetHandleForAddressRange"), 1);
}

TEST_F(CudaIfaceTest, ManagedMemoryIsNeverExported) {
  init();
  const unsigned long long managed = alloc(0, 1 << 20, FAKE_CUDA_MEM_MANAGED);
  Result<DmabufExport> exported = iface_.export_dmabuf({as_pointer(managed), 4096});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP);
  EXPECT_EQ(fake_cuda().call_count("cuMemGetHandleForAddressRange"), 0);
}

TEST_F(CudaIfaceTest, ExportsLeakNoFd) {
  init();
  const unsigned long long base = alloc(0, 1 << 20);
  const int before = open_fd_count();
  ASSERT_NO_FATAL_FAILURE(expect_exports_leak_no_fd(iface_, as_pointer(base), 4096));

  // A failed export leaves nothing open either.
  fake_cuda().set_failure("cuMemGetHandleForAddressRange", kOutOfMemory);
  EXPECT_FALSE(iface_.export_dmabuf({as_pointer(base), 4096}).ok());
  EXPECT_EQ(open_fd_count(), before);
}

TEST_F(CudaIfaceTest, CapabilitiesArePerDevice) {
  init();
  Result<hmem::DeviceCapabilities> first = iface_.capabilities(DeviceId{0});
  Result<hmem::DeviceCapabilities> second = iface_.capabilities(DeviceId{1});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->dmabuf.supported);
  EXPECT_TRUE(first->dmabuf.reason.empty());
  EXPECT_FALSE(second->dmabuf.supported);  // the fake's device 1 has no dma-buf
  EXPECT_NE(second->dmabuf.reason.find("device 1"), std::string::npos) << second->dmabuf.reason;
  EXPECT_NE(second->dmabuf.reason.find("DMA_BUF_SUPPORTED"), std::string::npos);
  for (const auto* caps : {&*first, &*second}) {  // every "no" says why
    EXPECT_FALSE(caps->peer_direct.supported);
    EXPECT_FALSE(caps->peer_direct.reason.empty());
    EXPECT_FALSE(caps->ipc.supported);
    EXPECT_FALSE(caps->ipc.reason.empty());
  }

  fake_cuda().set_device_attribute(0, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0);
  fake_cuda().set_device_attribute(1, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 1);
  EXPECT_FALSE(iface_.capabilities(DeviceId{0})->dmabuf.supported);
  EXPECT_TRUE(iface_.capabilities(DeviceId{1})->dmabuf.supported);
  EXPECT_EQ(iface_.capabilities(DeviceId{2}).status().code(), HMR_EINVAL);
}

TEST_F(CudaIfaceTest, PeerDirectNeedsTheDeviceAndAPeerMemoryClient) {
  init();
  Result<hmem::DeviceCapabilities> without = iface_.capabilities(DeviceId{0});
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->peer_direct.supported);
  EXPECT_NE(without->peer_direct.reason.find("peer-memory client"), std::string::npos)
      << without->peer_direct.reason;

  // A sysfs tree in which nvidia-peermem is loaded.
  char root[] = "/tmp/hmr-cuda-sysfs-XXXXXX";
  ASSERT_NE(mkdtemp(root), nullptr);
  const std::filesystem::path module = std::filesystem::path(root) / "sys/module/nvidia_peermem";
  std::filesystem::create_directories(module);
  std::ofstream(module / "version") << "1.0\n";
  CudaIface with_peermem(root);
  ASSERT_TRUE(with_peermem.init().ok());
  Result<hmem::DeviceCapabilities> with = with_peermem.capabilities(DeviceId{1});
  ASSERT_TRUE(with.ok());
  EXPECT_TRUE(with->peer_direct.supported) << with->peer_direct.reason;
  EXPECT_TRUE(with->peer_direct.reason.empty());

  fake_cuda().set_device_attribute(1, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0);
  Result<hmem::DeviceCapabilities> unable = with_peermem.capabilities(DeviceId{1});
  ASSERT_TRUE(unable.ok());
  EXPECT_FALSE(unable->peer_direct.supported);
  EXPECT_NE(unable->peer_direct.reason.find("GPU_DIRECT_RDMA_SUPPORTED = 0"), std::string::npos);
  std::filesystem::remove_all(root);
}

TEST_F(CudaIfaceTest, InjectedInitFailureFailsClosedWithTheDriverError) {
  fake_cuda().set_failure("cuInit", kNoDevice);
  Status status = iface_.init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);
  EXPECT_NE(status.reason().find("cuda iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("cuInit"), std::string::npos);
  EXPECT_NE(status.reason().find(fake_cuda_path()), std::string::npos);
  EXPECT_NE(status.reason().find("CUDA_ERROR_NO_DEVICE"), std::string::npos);
  EXPECT_NE(status.reason().find("no CUDA-capable device"), std::string::npos);  // driver's text

  // Unusable, but never a crash and never "host memory".
  int local = 0;
  EXPECT_FALSE(iface_.query(&local, sizeof local).ok());
  EXPECT_FALSE(iface_.device_count().ok());

  fake_cuda().set_failure("cuInit", 0);
  EXPECT_TRUE(iface_.init().ok());  // a failed init can be retried
}

TEST_F(CudaIfaceTest, MissingLibraryMeansIfaceUnavailable) {
  setenv("HMR_CUDA_LIBRARY", "/nonexistent/hmr/libcuda.so.1", 1);
  Status status = iface_.init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_NE(status.reason().find("cuda iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("/nonexistent/hmr/libcuda.so.1"), std::string::npos);
  EXPECT_TRUE(iface_.library_path().empty());

  int local = 0;
  EXPECT_FALSE(iface_.query(&local, sizeof local).ok());
  EXPECT_FALSE(iface_.export_dmabuf({&local, sizeof local}).ok());
  EXPECT_FALSE(iface_.capabilities(DeviceId{0}).ok());
}

}  // namespace
}  // namespace hmr::cuda
