// hmem::Registry against the fake CUDA driver (and the fake Level Zero loader for detection
// order): detection, verification of declarations, fail-closed answers, missing runtimes,
// and what hmr-info reads from describe().
#include "hmem/hmem_registry.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/hmem/fake_cuda_library.h"
#include "tests/hmem/ze_fake_library.h"

namespace hmr::hmem {
namespace {

using hmr::testing::as_pointer;
using hmr::testing::fake_cuda;
using hmr::testing::fake_ze;

constexpr int kCudaUnknownError = 999;
constexpr int kCudaNoDevice = 100;
constexpr int kZeInvalidArgument = 0x78000004;

IfaceSelection selection_of(const char* text) {
  Result<IfaceSelection> selection = parse_iface_list(text);
  EXPECT_TRUE(selection.ok()) << selection.status().reason();
  return selection.ok() ? *selection : IfaceSelection{};
}

// A copy: describe() returns a fresh vector each time.
IfaceReport report_of(const std::vector<IfaceReport>& reports, int iface) {
  return reports.at(static_cast<size_t>(iface));
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

class RegistryTest : public hmr::testing::FakeCudaTest {
 protected:
  std::vector<char> host_ = std::vector<char>(8192);
};

TEST_F(RegistryTest, HostPointerWithNoDeviceRuntimeIsSystemMemory) {
  Registry registry(selection_of("system"));
  ASSERT_TRUE(registry.load().ok());
  Result<PointerInfo> info = registry.classify(host_.data() + 10, 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_SYSTEM);
  EXPECT_EQ(info->kind, MemoryKind::host);
  EXPECT_EQ(info->alloc_id, 0u);
  const auto start = reinterpret_cast<uintptr_t>(host_.data() + 10);
  EXPECT_LE(info->base, start);
  EXPECT_GE(info->base + info->alloc_len, start + 100);
  EXPECT_EQ(info->base % 4096, 0u);
  EXPECT_EQ(registry.classify(nullptr, 1).status().code(), HMR_EINVAL);
  EXPECT_EQ(registry.classify(host_.data(), 0).status().code(), HMR_EINVAL);
  EXPECT_EQ(registry.classify(as_pointer(~0ull - 10), 100).status().code(), HMR_EINVAL);
}

TEST_F(RegistryTest, DetectsCudaMemoryWithItsKindDeviceAndIdentity) {
  Registry registry(selection_of("cuda"));
  const unsigned long long device = alloc(1, 1 << 20);
  const unsigned long long pinned = alloc(0, 4096, FAKE_CUDA_MEM_HOST);
  const unsigned long long managed = alloc(0, 8192, FAKE_CUDA_MEM_MANAGED);

  Result<PointerInfo> info = registry.classify(as_pointer(device + 4096), 4096);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_CUDA);
  EXPECT_EQ(info->device, DeviceId{1});
  EXPECT_EQ(info->base, device);
  EXPECT_EQ(info->alloc_len, 1u << 20);
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_NE(info->alloc_id, 0u);
  EXPECT_EQ(info->sys_dev, "0000:65:00.0");

  EXPECT_EQ(registry.classify(as_pointer(pinned), 1)->kind, MemoryKind::host_alloc);
  EXPECT_EQ(registry.classify(as_pointer(managed), 1)->kind, MemoryKind::managed);
  EXPECT_EQ(registry.classify(host_.data(), host_.size())->iface, HMR_HMEM_SYSTEM);
}

TEST_F(RegistryTest, DeclarationsAreVerifiedAndContradictionsAreErrors) {
  Registry registry(selection_of("cuda"));
  const unsigned long long device = alloc(0, 1 << 20);

  Result<PointerInfo> declared = registry.verify(HMR_HMEM_CUDA, 0, as_pointer(device), 4096);
  ASSERT_TRUE(declared.ok()) << declared.status().reason();
  EXPECT_EQ(declared->base, device);

  Result<PointerInfo> wrong_device = registry.verify(HMR_HMEM_CUDA, 1, as_pointer(device), 4096);
  ASSERT_FALSE(wrong_device.ok());
  EXPECT_EQ(wrong_device.status().code(), HMR_EINVAL);
  EXPECT_TRUE(contains(wrong_device.status().reason(), "on cuda device 0"))
      << wrong_device.status().reason();

  Result<PointerInfo> called_host = registry.verify(HMR_HMEM_SYSTEM, 0, as_pointer(device), 4096);
  ASSERT_FALSE(called_host.ok());
  EXPECT_EQ(called_host.status().code(), HMR_EINVAL);
  EXPECT_TRUE(contains(called_host.status().reason(), "declared system memory"))
      << called_host.status().reason();

  Result<PointerInfo> called_device = registry.verify(HMR_HMEM_CUDA, 0, host_.data(), 16);
  ASSERT_FALSE(called_device.ok());
  EXPECT_EQ(called_device.status().code(), HMR_EINVAL);
  EXPECT_TRUE(contains(called_device.status().reason(), "does not know it"))
      << called_device.status().reason();

  EXPECT_TRUE(registry.verify(HMR_HMEM_SYSTEM, 0, host_.data(), 16).ok());
  EXPECT_EQ(registry.verify(HMR_HMEM_SYSTEM, 3, host_.data(), 16).status().code(), HMR_EINVAL);

  // The runtime's pinned host memory declared as system memory, as libfabric users declare
  // their staging buffers: host memory, with the runtime's identity (it was refused).  Managed
  // memory is not host memory to the NIC.
  const unsigned long long pinned = alloc(0, 4096, FAKE_CUDA_MEM_HOST);
  Result<PointerInfo> staging = registry.verify(HMR_HMEM_SYSTEM, 0, as_pointer(pinned), 4096);
  ASSERT_TRUE(staging.ok()) << staging.status().reason();
  EXPECT_EQ(staging->kind, MemoryKind::host_alloc);
  const unsigned long long managed = alloc(0, 8192, FAKE_CUDA_MEM_MANAGED);
  EXPECT_EQ(registry.verify(HMR_HMEM_SYSTEM, 0, as_pointer(managed), 4096).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(registry.verify(7, 0, host_.data(), 16).status().code(), HMR_EINVAL);
}

TEST_F(RegistryTest, MissingRuntimeIsReportedAndDeclaredMemoryFailsWithItsReason) {
  setenv("HMR_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  Registry registry(selection_of("cuda"));
  ASSERT_TRUE(registry.load().ok());

  // Undeclared host memory is host memory: no CUDA memory can exist without the runtime.
  EXPECT_EQ(registry.classify(host_.data(), 16)->iface, HMR_HMEM_SYSTEM);

  Result<PointerInfo> declared = registry.verify(HMR_HMEM_CUDA, 0, host_.data(), 16);
  ASSERT_FALSE(declared.ok());
  EXPECT_EQ(declared.status().code(), HMR_ENOSYS);
  EXPECT_TRUE(contains(declared.status().reason(), "never treated as host memory"));
  EXPECT_TRUE(contains(declared.status().reason(), "/nonexistent/libcuda.so.1"))
      << declared.status().reason();

  const IfaceReport cuda = report_of(registry.describe(), HMR_HMEM_CUDA);
  EXPECT_TRUE(cuda.enabled);
  EXPECT_TRUE(cuda.built);
  EXPECT_FALSE(cuda.loaded);
  EXPECT_EQ(cuda.library, "/nonexistent/libcuda.so.1");
  EXPECT_TRUE(contains(cuda.reason, "/nonexistent/libcuda.so.1")) << cuda.reason;
}

TEST_F(RegistryTest, DisabledIfaceIsRefusedNamingFiHmem) {
  Registry registry(selection_of("^cuda"));
  const unsigned long long device = alloc(0, 4096);
  Result<PointerInfo> declared = registry.verify(HMR_HMEM_CUDA, 0, as_pointer(device), 16);
  ASSERT_FALSE(declared.ok());
  EXPECT_EQ(declared.status().code(), HMR_ENOSYS);
  EXPECT_TRUE(contains(declared.status().reason(), "disabled by FI_HMEM='^cuda'"))
      << declared.status().reason();
  const IfaceReport cuda = report_of(registry.describe(), HMR_HMEM_CUDA);
  EXPECT_FALSE(cuda.enabled);
  EXPECT_FALSE(cuda.loaded);
  EXPECT_EQ(fake_cuda().call_count("cuInit"), 0);  // a disabled runtime is never loaded
}

TEST_F(RegistryTest, RuntimeErrorDuringDetectionFailsClosed) {
  Registry registry(selection_of("cuda"));
  ASSERT_TRUE(registry.load().ok());
  fake_cuda().set_failure("cuPointerGetAttributes", kCudaUnknownError);
  Result<PointerInfo> info = registry.classify(host_.data(), 16);
  fake_cuda().set_failure("cuPointerGetAttributes", 0);
  ASSERT_FALSE(info.ok()) << "an unanswered question is not host memory";
  EXPECT_TRUE(contains(info.status().reason(), "cuPointerGetAttributes"))
      << info.status().reason();
}

TEST_F(RegistryTest, RuntimeTheApplicationLoadedButHmrCannotInitBlocksGuessing) {
  // The fake driver is already in this process (the test loaded it), as an application's own
  // libcuda would be; hmr's init of it fails.
  fake_cuda().set_failure("cuInit", kCudaUnknownError);
  Registry registry(selection_of("cuda"));
  ASSERT_TRUE(registry.load().ok());
  Result<PointerInfo> info = registry.classify(host_.data(), 16);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOSYS);
  EXPECT_TRUE(contains(info.status().reason(), "FI_HMEM=^cuda")) << info.status().reason();
  EXPECT_TRUE(report_of(registry.describe(), HMR_HMEM_CUDA).resident);

  // Excluding the runtime is the caller's statement that it has no such memory.
  Registry excluded(selection_of("^cuda"));
  EXPECT_EQ(excluded.classify(host_.data(), 16)->iface, HMR_HMEM_SYSTEM);
  fake_cuda().set_failure("cuInit", 0);
}

// A runtime whose init finds no device holds no memory here, loaded or not: the application's
// init of the same library meets the same.  (A SYCL framework loads Level Zero's loader on hosts
// without an Intel GPU; every registration failed there.)
TEST_F(RegistryTest, ALoadedRuntimeWithNoDeviceLeavesHostMemoryHost) {
  fake_cuda().set_failure("cuInit", kCudaNoDevice);
  Registry registry(selection_of("cuda"));
  ASSERT_TRUE(registry.load().ok());
  Result<PointerInfo> info = registry.classify(host_.data(), 16);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_SYSTEM);
  const IfaceReport cuda = report_of(registry.describe(), HMR_HMEM_CUDA);
  EXPECT_TRUE(cuda.resident);
  EXPECT_FALSE(cuda.loaded);
  EXPECT_TRUE(contains(cuda.reason, "CUDA_ERROR_NO_DEVICE")) << cuda.reason;
  fake_cuda().set_failure("cuInit", 0);
}

TEST_F(RegistryTest, RuntimesLoadOnceAcrossCalls) {
  Registry registry(selection_of("cuda"));
  ASSERT_TRUE(registry.load().ok());
  ASSERT_TRUE(registry.load().ok());
  (void)registry.classify(host_.data(), 16);
  (void)registry.describe();
  EXPECT_EQ(fake_cuda().call_count("cuInit"), 1);
}

TEST_F(RegistryTest, DescribeListsEveryIfaceWithDevicesAndReasons) {
  Registry registry(selection_of("cuda"));
  const std::vector<IfaceReport> reports = registry.describe();
  ASSERT_EQ(reports.size(), static_cast<size_t>(HMR_HMEM_IFACE_COUNT));
  const IfaceReport& system = report_of(reports, HMR_HMEM_SYSTEM);
  EXPECT_TRUE(system.loaded);
  EXPECT_EQ(system.name, "system");

  const IfaceReport& cuda = report_of(reports, HMR_HMEM_CUDA);
  EXPECT_TRUE(cuda.loaded) << cuda.reason;
  EXPECT_EQ(cuda.library, hmr::testing::fake_cuda_path());
  EXPECT_EQ(cuda.version, "12.8");
  EXPECT_EQ(cuda.free_tracking, Iface::FreeTracking::alloc_id);
  ASSERT_EQ(cuda.devices.size(), static_cast<size_t>(FAKE_CUDA_DEVICE_COUNT));
  // The fake gives dma-buf to device 0 only: answers are per device, each "no" with a reason.
  EXPECT_TRUE(cuda.devices[0].dmabuf.supported);
  EXPECT_FALSE(cuda.devices[1].dmabuf.supported);
  EXPECT_FALSE(cuda.devices[1].dmabuf.reason.empty());

  const IfaceReport& rocr = report_of(reports, HMR_HMEM_ROCR);
  EXPECT_FALSE(rocr.enabled);
  EXPECT_TRUE(contains(rocr.reason, "FI_HMEM='cuda'")) << rocr.reason;

  Result<DeviceCapabilities> caps = registry.capabilities(HMR_HMEM_CUDA, DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_TRUE(caps->dmabuf.supported);
  EXPECT_EQ(registry.capabilities(HMR_HMEM_CUDA, DeviceId{5}).status().code(), HMR_ENODEV);
}

TEST_F(RegistryTest, BadConfigurationFailsEveryCall) {
  Registry registry(parse_iface_list("cuda,gpu").status());
  EXPECT_EQ(registry.load().code(), HMR_EINVAL);
  Result<PointerInfo> info = registry.classify(host_.data(), 16);
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(contains(info.status().reason(), "'gpu'")) << info.status().reason();
  EXPECT_EQ(registry.loaded_iface(HMR_HMEM_SYSTEM).status().code(), HMR_EINVAL);
}

// The first iface in the detection order that answers decides: with Level Zero asked first and
// failing, detection of a CUDA pointer fails closed; asked after CUDA, it is never reached.
TEST_F(RegistryTest, DetectionAsksIfacesInTheFiHmemOrder) {
  setenv("HMR_ZE_LIBRARY", fake_ze().path, 1);
  fake_ze().reset();
  const unsigned long long device = alloc(0, 4096);

  Registry cuda_first(selection_of("cuda,ze"));
  Registry ze_first(selection_of("ze,cuda"));
  ASSERT_TRUE(cuda_first.load().ok());
  ASSERT_TRUE(ze_first.load().ok());
  ASSERT_TRUE(report_of(ze_first.describe(), HMR_HMEM_ZE).loaded)
      << report_of(ze_first.describe(), HMR_HMEM_ZE).reason;

  fake_ze().set_failure("zeMemGetAllocProperties", kZeInvalidArgument);
  Result<PointerInfo> via_cuda = cuda_first.classify(as_pointer(device), 16);
  Result<PointerInfo> via_ze = ze_first.classify(as_pointer(device), 16);
  fake_ze().set_failure("zeMemGetAllocProperties", 0);
  unsetenv("HMR_ZE_LIBRARY");

  ASSERT_TRUE(via_cuda.ok()) << via_cuda.status().reason();
  EXPECT_EQ(via_cuda->iface, HMR_HMEM_CUDA);
  EXPECT_FALSE(via_ze.ok()) << "Level Zero was asked first and could not answer";
}

}  // namespace
}  // namespace hmr::hmem
