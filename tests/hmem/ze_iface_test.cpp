// The Level Zero iface against the fake loader (tests/fakes/fake_ze.c), loaded the way a user
// points hmr at a loader: HMR_ZE_LIBRARY.
#include "ze/ze_iface.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "hmem/page_range.h"
#include "hmem/ze_device.h"
#include "tests/hmem/export_checks.h"
#include "tests/hmem/ze_fake_library.h"
#include "tests/hmem/ze_iface_fixture.h"

namespace hmr::ze {
namespace {

using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::FakeZe;
using hmr::testing::fake_ze;
using hmr::testing::fake_ze_api10;
using hmr::testing::expect_exports_leak_no_fd;
using hmr::testing::open_fd_count;

constexpr int kDeviceLost = 0x70000001;
constexpr int kOutOfDeviceMemory = 0x70000003;
constexpr int kUninitialized = 0x78000001;
constexpr int kUnsupportedFeature = 0x78000003;
constexpr size_t kFakeGranule = 64 << 10;  // the fake's allocation granularity

// hmr's ids for the fake's devices: driver << 16 | device.
constexpr DeviceId kDriver0Device0{0x0};
constexpr DeviceId kDriver0Device1{0x1};  // cannot export dma-bufs
constexpr DeviceId kDriver1Device0{0x10000};

class ZeIfaceTest : public hmr::testing::ZeIfaceFixture {};

class ZeIfaceApi10Test : public ZeIfaceTest {
 protected:
  const FakeZe& fake() const override { return fake_ze_api10(); }
};

TEST_F(ZeIfaceTest, InitFindsEveryDriversDevicesUnderTheirEncodedIds) {
  init();
  EXPECT_EQ(iface_->library_path(), fake().path);
  EXPECT_EQ(iface_->runtime_version(), "Level Zero API 1.6");
  EXPECT_EQ(fake().last_init_flags(), ZE_INIT_FLAG_GPU_ONLY);
  EXPECT_EQ(*iface_->device_count(), FAKE_ZE_DEVICE_COUNT);
  EXPECT_EQ(iface_->free_tracking(), hmem::Iface::FreeTracking::alloc_id);

  Result<std::vector<ZeDeviceInfo>> devices = iface_->devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 3u);
  EXPECT_EQ((*devices)[0].device, kDriver0Device0);
  EXPECT_EQ((*devices)[1].device, kDriver0Device1);
  EXPECT_EQ((*devices)[2].device, kDriver1Device0);
  const ZeDeviceInfo& last = (*devices)[2];
  EXPECT_EQ(last.driver_index, 1);
  EXPECT_EQ(last.device_index, 0);
  EXPECT_EQ(last.name, "Fake Level Zero GPU 1.0");
  EXPECT_EQ(last.uuid, "d1e00203-0405-0607-0809-0a0b0c0d0e0f");
  EXPECT_EQ(last.pci_bus_id, "0000:5a:00.0");
  for (const ZeDeviceInfo& info : *devices) {
    Result<hmem::ZeDeviceIndex> decoded = hmem::decode_ze_device(static_cast<int>(info.device.value));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->driver, info.driver_index);
    EXPECT_EQ(decoded->device, info.device_index);
  }

  EXPECT_EQ(fake().live_contexts(), FAKE_ZE_DRIVER_COUNT);  // one per driver
  EXPECT_TRUE(iface_->init().ok());  // a second init is a no-op
  EXPECT_EQ(fake().call_count("zeInit"), 1);
  iface_.reset();
  EXPECT_EQ(fake().live_contexts(), 0);
}

TEST_F(ZeIfaceTest, QueryDescribesTheWholeDeviceAllocation) {
  init();
  const size_t size = (1u << 20) + 123;
  auto* base = static_cast<char*>(alloc(1, 0, size));
  Result<PointerInfo> info = iface_->query(base + 4096 + 7, 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_ZE);
  EXPECT_EQ(info->device, kDriver1Device0);
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(base));
  EXPECT_EQ(info->alloc_len, size);
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_NE(info->alloc_id, 0u);
  EXPECT_EQ(info->sys_dev, "0000:5a:00.0");
}

TEST_F(ZeIfaceTest, DevicesHaveDistinctRangesIdsAndAllocationIds) {
  init();
  void* on00 = alloc(0, 0, 4096);
  void* on01 = alloc(0, 1, 4096);
  void* on10 = alloc(1, 0, 4096);
  Result<PointerInfo> a = iface_->query(on00, 1);
  Result<PointerInfo> b = iface_->query(on01, 1);
  Result<PointerInfo> c = iface_->query(on10, 1);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->device, kDriver0Device0);
  EXPECT_EQ(b->device, kDriver0Device1);
  EXPECT_EQ(c->device, kDriver1Device0);
  EXPECT_NE(a->base, b->base);
  EXPECT_NE(b->base, c->base);
  EXPECT_NE(a->alloc_id, b->alloc_id);
  EXPECT_NE(b->alloc_id, c->alloc_id);
  EXPECT_EQ(a->sys_dev, "0000:3a:00.0");
  EXPECT_EQ(b->sys_dev, "0000:4a:00.0");
}

TEST_F(ZeIfaceTest, HostAndSharedMemoryAreTold) {
  init();
  Result<PointerInfo> host = iface_->query(alloc(1, 0, 4096, FAKE_ZE_MEM_HOST), 16);
  ASSERT_TRUE(host.ok()) << host.status().reason();
  EXPECT_EQ(host->kind, MemoryKind::host_alloc);
  EXPECT_EQ(host->device, kDriver1Device0);  // the driver's device 0: host memory has no device
  EXPECT_TRUE(host->sys_dev.empty());
  Result<PointerInfo> shared = iface_->query(alloc(0, 1, 4096, FAKE_ZE_MEM_SHARED), 16);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->kind, MemoryKind::managed);
  EXPECT_EQ(shared->device, kDriver0Device1);
}

// identify() (the device hit path's question) names the allocation as query() does, for each
// kind of memory, with zeMemGetAllocProperties alone (one per driver until one owns the
// pointer: two for driver 1's memory here) where query() also asks zeMemGetAddressRange.
TEST_F(ZeIfaceTest, IdentifyAgreesWithQueryInOneDriverCall) {
  init();
  auto* device = static_cast<char*>(alloc(1, 0, 1 << 20));
  void* host = alloc(0, 0, 4096, FAKE_ZE_MEM_HOST);
  void* shared = alloc(0, 1, 4096, FAKE_ZE_MEM_SHARED);
  for (const void* ptr : std::vector<const void*>{device + 4096, host, shared}) {
    const int before_query = fake().call_count("*");
    Result<PointerInfo> info = iface_->query(ptr, 64);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    const int query_calls = fake().call_count("*") - before_query;
    const int before = fake().call_count("*");
    const int ranges = fake().call_count("zeMemGetAddressRange");
    hmem::AllocationIdentity identity;
    ASSERT_TRUE(iface_->identify(ptr, 64, identity).ok());
    EXPECT_EQ(fake().call_count("*") - before, query_calls - 1) << "driver calls of identify()";
    EXPECT_EQ(fake().call_count("zeMemGetAddressRange"), ranges);
    EXPECT_EQ(identity.iface, HMR_HMEM_ZE);
    EXPECT_EQ(identity.device, info->device.value);
    EXPECT_EQ(identity.alloc_id, info->alloc_id);
    EXPECT_EQ(identity.kind, info->kind);
  }
  std::vector<char> plain(4096);
  hmem::AllocationIdentity identity;
  EXPECT_EQ(iface_->identify(plain.data(), 64, identity).code(), HMR_ENOENT);
  // Freed and allocated again at the same address: another identity.
  hmem::AllocationIdentity before;
  ASSERT_TRUE(iface_->identify(device, 64, before).ok());
  free_allocation(device);
  EXPECT_EQ(iface_->identify(device, 64, identity).code(), HMR_ENOENT);
  ASSERT_EQ(alloc(1, 0, 1 << 20), device);
  ASSERT_TRUE(iface_->identify(device, 64, identity).ok());
  EXPECT_NE(identity.alloc_id, before.alloc_id);
}

TEST_F(ZeIfaceTest, HostPointerIsNotZeMemory) {
  init();
  std::vector<char> host(4096);
  Result<PointerInfo> info = iface_->query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT);
  EXPECT_NE(info.status().reason().find("not Level Zero memory"), std::string::npos);
}

TEST_F(ZeIfaceTest, RangeOutsideOneAllocationIsRejected) {
  init();
  auto* base = static_cast<char*>(alloc(0, 0, 8192));
  Result<PointerInfo> info = iface_->query(base + 4096, 8192);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EINVAL);
  EXPECT_NE(info.status().reason().find("not inside one Level Zero allocation"), std::string::npos);
  EXPECT_EQ(iface_->query(base, 0).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->query(base, SIZE_MAX).status().code(), HMR_EINVAL);
}

TEST_F(ZeIfaceTest, ReallocationAtTheSameAddressGetsANewAllocationId) {
  init();
  void* first = alloc(0, 0, 1 << 16);
  Result<PointerInfo> before = iface_->query(first, 64);
  ASSERT_TRUE(before.ok());
  free_allocation(first);
  EXPECT_EQ(iface_->query(first, 64).status().code(), HMR_ENOENT);
  void* second = alloc(0, 0, 1 << 16);
  ASSERT_EQ(second, first);  // the fake reuses the lowest free address, as drivers often do
  Result<PointerInfo> after = iface_->query(second, 64);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->alloc_id, before->alloc_id);
}

TEST_F(ZeIfaceTest, QueryFailureFailsClosed) {
  init();
  fake().set_failure("zeMemGetAllocProperties", kDeviceLost);
  std::vector<char> host(64);
  Result<PointerInfo> info = iface_->query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EIO);  // not HMR_ENOENT: never "so it is host memory"
  EXPECT_NE(info.status().reason().find("ZE_RESULT_ERROR_DEVICE_LOST"), std::string::npos);
}

TEST_F(ZeIfaceTest, ExportGivesTheAllocationWithTheRangesOffset) {
  init();
  const size_t page = hmem::host_page_size();
  auto* base = static_cast<char*>(alloc(0, 0, 5 * page + 10));
  char* address = base + 3 * page + 100;
  std::vector<char> pattern(page + 50);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 13 + 5);
  ASSERT_TRUE(iface_->copy_to_device(address, pattern.data(), pattern.size()).ok());

  Result<DmabufExport> exported = iface_->export_dmabuf({address, pattern.size()});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, 3 * page + 100);
  EXPECT_EQ(exported->len, pattern.size());
  EXPECT_EQ(exported->exported_len, kFakeGranule);  // the whole allocation, as the driver sized it

  struct stat st {};
  ASSERT_EQ(fstat(exported->fd.get(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), exported->exported_len);
  void* view = mmap(nullptr, exported->exported_len, PROT_READ, MAP_SHARED, exported->fd.get(), 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(std::memcmp(static_cast<char*>(view) + exported->offset, pattern.data(),
                        pattern.size()),
            0);
  munmap(view, exported->exported_len);
}

TEST_F(ZeIfaceTest, OnlyExportableDeviceMemoryIsExported) {
  init();
  Result<DmabufExport> host = iface_->export_dmabuf({alloc(0, 0, 4096, FAKE_ZE_MEM_HOST), 64});
  EXPECT_EQ(host.status().code(), HMR_EOPNOTSUPP);
  Result<DmabufExport> shared = iface_->export_dmabuf({alloc(0, 0, 4096, FAKE_ZE_MEM_SHARED), 64});
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(shared.status().reason().find("managed"), std::string::npos);
  Result<DmabufExport> incapable = iface_->export_dmabuf({alloc(0, 1, 4096), 64});
  ASSERT_FALSE(incapable.ok());
  EXPECT_EQ(incapable.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(incapable.status().reason().find("cannot export allocations as dma-buf"),
            std::string::npos)
      << incapable.status().reason();
  std::vector<char> plain(64);
  EXPECT_EQ(iface_->export_dmabuf({plain.data(), plain.size()}).status().code(), HMR_ENOENT);
}

TEST_F(ZeIfaceTest, ExportsLeakNoFd) {
  init();
  auto* base = static_cast<char*>(alloc(1, 0, 1 << 20));
  // The driver makes its own fd on the first export and keeps it until the memory is freed
  // (ze_runtime_behaviour_test.cpp); that one is not hmr's to count.
  ASSERT_TRUE(iface_->export_dmabuf({base, 4096}).ok());
  const int before = open_fd_count();
  ASSERT_NO_FATAL_FAILURE(expect_exports_leak_no_fd(*iface_, base, 4096));

  fake().set_failure("zeMemGetAllocProperties:export", kUnsupportedFeature);
  Result<DmabufExport> failed = iface_->export_dmabuf({base, 4096});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(failed.status().reason().find("ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"),
            std::string::npos);
  EXPECT_EQ(open_fd_count(), before);
}

// compute-runtime before 22.49 made a new dma-buf fd on every export, the caller's to close;
// hmr duplicated it as if it were the driver's, and every export leaked an fd and the buffer
// behind it (found by a review).  hmr asks at its first export whether the driver keeps the
// fd, and takes it as its own where it does not.
TEST_F(ZeIfaceTest, ExportsOfADriverThatMakesAnFdPerExportLeakNoFd) {
  fake().set_fd_per_export(1);
  init();
  auto* base = static_cast<char*>(alloc(1, 0, 1 << 20));
  const int before = open_fd_count();
  ASSERT_TRUE(iface_->export_dmabuf({base, 4096}).ok());
  EXPECT_EQ(open_fd_count(), before) << "the first export (and its probe) left an fd";
  ASSERT_NO_FATAL_FAILURE(expect_exports_leak_no_fd(*iface_, base, 4096));
  EXPECT_EQ(open_fd_count(), before);
}

TEST_F(ZeIfaceTest, CapabilitiesArePerDeviceAndSayWhy) {
  init();
  Result<DeviceCapabilities> first = iface_->capabilities(kDriver0Device0);
  Result<DeviceCapabilities> second = iface_->capabilities(kDriver0Device1);
  Result<DeviceCapabilities> third = iface_->capabilities(kDriver1Device0);
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  EXPECT_TRUE(first->dmabuf.supported);
  EXPECT_TRUE(first->dmabuf.reason.empty());
  EXPECT_FALSE(second->dmabuf.supported);
  EXPECT_NE(second->dmabuf.reason.find("ze device 0x1"), std::string::npos) << second->dmabuf.reason;
  EXPECT_NE(second->dmabuf.reason.find("export types 0x1"), std::string::npos);
  EXPECT_TRUE(third->dmabuf.supported);
  EXPECT_EQ(third->device, kDriver1Device0);
  EXPECT_EQ(third->sys_dev, "0000:5a:00.0");
  for (const auto* caps : {&*first, &*second, &*third}) {
    EXPECT_FALSE(caps->peer_direct.supported);
    EXPECT_FALSE(caps->peer_direct.reason.empty());
    EXPECT_FALSE(caps->ipc.supported);
    EXPECT_FALSE(caps->ipc.reason.empty());
  }

  Result<DeviceCapabilities> missing = iface_->capabilities(DeviceId{2});  // driver 0, device 2
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), HMR_EINVAL);
  EXPECT_NE(missing.status().reason().find("driver 0, device 2"), std::string::npos);
  EXPECT_EQ(iface_->capabilities(DeviceId{0x20000}).status().code(), HMR_EINVAL);
  Result<DeviceCapabilities> garbage = iface_->capabilities(DeviceId{0x80000000ull});
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().reason().find("not a driver << 16 | device"), std::string::npos);
}

TEST_F(ZeIfaceTest, CopiesMoveBytesBothWaysAndReuseCommandLists) {
  init();
  Result<void*> device = iface_->mem_alloc(kDriver1Device0, 3 * 4096, MemoryKind::device_only);
  ASSERT_TRUE(device.ok()) << device.status().reason();
  auto* base = static_cast<char*>(*device);
  std::vector<char> out(5000);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i % 253);
  ASSERT_TRUE(iface_->copy_to_device(base + 1000, out.data(), out.size()).ok());
  std::vector<char> seen(out.size());
  ASSERT_EQ(fake().read(base + 1000, seen.data(), seen.size()), 0);  // the fake's own view
  EXPECT_EQ(seen, out);
  std::vector<char> back(out.size());
  ASSERT_TRUE(iface_->copy_from_device(back.data(), base + 1000, back.size()).ok());
  EXPECT_EQ(back, out);

  EXPECT_EQ(fake().call_count("zeCommandListCreateImmediate"), 1);  // one list, reused
  EXPECT_EQ(fake().call_count("zeCommandListHostSynchronize"), 2);  // each copy waited for
  EXPECT_EQ(fake().live_command_lists(), 1);
  ASSERT_TRUE(iface_->mem_free(base).ok());
  iface_.reset();
  EXPECT_EQ(fake().live_command_lists(), 0);
  EXPECT_EQ(fake().live_contexts(), 0);
}

TEST_F(ZeIfaceTest, CopiesReachHostAndSharedMemoryToo) {
  init();
  void* host = alloc(0, 0, 4096, FAKE_ZE_MEM_HOST);
  const char text[] = "level zero host memory";
  ASSERT_TRUE(iface_->copy_to_device(host, text, sizeof text).ok());
  EXPECT_STREQ(static_cast<const char*>(host), text);  // host memory: the CPU may read it
}

TEST_F(ZeIfaceTest, CopiesRejectBadArgumentsAndReportFailures) {
  init();
  void* device = alloc(0, 0, 4096);
  char host[16] = {};
  EXPECT_EQ(iface_->copy_to_device(nullptr, host, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(device, nullptr, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(device, host, 0).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_from_device(host, nullptr, sizeof host).code(), HMR_EINVAL);
  Status not_ze = iface_->copy_to_device(host, host + 8, 8);
  EXPECT_EQ(not_ze.code(), HMR_ENOENT);
  EXPECT_NE(not_ze.reason().find("not Level Zero memory"), std::string::npos);
  Status past = iface_->copy_to_device(static_cast<char*>(device) + 4090, host, sizeof host);
  EXPECT_EQ(past.code(), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("zeCommandListAppendMemoryCopy"), 0);

  fake().set_failure("zeCommandListAppendMemoryCopy", kDeviceLost);
  Status failed = iface_->copy_from_device(host, device, sizeof host);
  EXPECT_EQ(failed.code(), HMR_EIO);
  EXPECT_NE(failed.reason().find("zeCommandListAppendMemoryCopy"), std::string::npos);
  EXPECT_EQ(fake().live_command_lists(), 0);  // a failed list is not kept

  fake().set_failure("zeCommandListAppendMemoryCopy", 0);
  fake().set_failure("zeCommandListCreateImmediate", kOutOfDeviceMemory);
  Status no_list = iface_->copy_from_device(host, device, sizeof host);
  EXPECT_EQ(no_list.code(), HMR_ENOMEM);
  EXPECT_NE(no_list.reason().find("zeCommandListCreateImmediate"), std::string::npos);
}

TEST_F(ZeIfaceTest, MemAllocGivesEachKindAndFreesIt) {
  init();
  Result<void*> device = iface_->mem_alloc(kDriver0Device0, 4096, MemoryKind::device_only);
  Result<void*> incapable = iface_->mem_alloc(kDriver0Device1, 4096, MemoryKind::device_only);
  Result<void*> host = iface_->mem_alloc(kDriver1Device0, 100, MemoryKind::host_alloc);
  Result<void*> shared = iface_->mem_alloc(kDriver0Device1, 4096, MemoryKind::managed);
  ASSERT_TRUE(device.ok() && incapable.ok() && host.ok() && shared.ok());

  EXPECT_EQ(fake().export_flags(*device), ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF);  // declared
  EXPECT_EQ(fake().export_flags(*incapable), -1);  // the device cannot, so nothing is asked
  EXPECT_EQ(iface_->query(*device, 1)->kind, MemoryKind::device_only);
  EXPECT_EQ(iface_->query(*incapable, 1)->device, kDriver0Device1);
  EXPECT_EQ(iface_->query(*host, 100)->kind, MemoryKind::host_alloc);
  EXPECT_EQ(iface_->query(*host, 100)->device, kDriver1Device0);
  EXPECT_EQ(iface_->query(*shared, 1)->kind, MemoryKind::managed);
  EXPECT_EQ(iface_->query(*shared, 1)->device, kDriver0Device1);
  std::memset(*host, 0x5a, 100);  // host memory: the CPU may touch it

  for (void* ptr : {*device, *incapable, *host, *shared}) {
    ASSERT_TRUE(iface_->mem_free(ptr).ok());
    EXPECT_EQ(iface_->query(ptr, 1).status().code(), HMR_ENOENT);
  }
}

TEST_F(ZeIfaceTest, MemAllocAndFreeRejectBadArguments) {
  init();
  EXPECT_EQ(iface_->mem_alloc(DeviceId{2}, 4096, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(kDriver0Device0, 0, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(kDriver0Device0, 4096, MemoryKind::host).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_->mem_free(nullptr).code(), HMR_EINVAL);
  std::vector<char> plain(64);
  EXPECT_EQ(iface_->mem_free(plain.data()).code(), HMR_EINVAL);
  auto* base = static_cast<char*>(alloc(0, 0, 8192));
  Status inside = iface_->mem_free(base + 4096);
  EXPECT_EQ(inside.code(), HMR_EINVAL);
  EXPECT_NE(inside.reason().find("not the start of its allocation"), std::string::npos);
  EXPECT_EQ(fake().call_count("zeMemFree"), 0);

  fake().set_failure("zeMemAllocDevice", kOutOfDeviceMemory);
  Result<void*> failed = iface_->mem_alloc(kDriver0Device0, 4096, MemoryKind::device_only);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_ENOMEM);
  EXPECT_NE(failed.status().reason().find("zeMemAllocDevice"), std::string::npos);
}

TEST_F(ZeIfaceTest, HostRegistrationAndFreeWatchesAreUnsupportedWithAReason) {
  init();
  std::vector<char> host(4096);
  Status registered = iface_->host_register(host.data(), host.size());
  EXPECT_EQ(registered.code(), HMR_EOPNOTSUPP);
  EXPECT_NE(registered.reason().find("zeMemAllocHost"), std::string::npos);
  EXPECT_EQ(iface_->host_unregister(host.data()).code(), HMR_EOPNOTSUPP);
  PointerInfo info;
  info.iface = HMR_HMEM_ZE;
  EXPECT_EQ(iface_->watch_free(info, [](void*, uint64_t, size_t) {}, nullptr).code(),
            HMR_EOPNOTSUPP);  // frees show as new allocation ids instead
}

TEST_F(ZeIfaceTest, InitFailureFailsClosedWithTheLoadersError) {
  fake().set_failure("zeInit", kUninitialized);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);
  EXPECT_NE(status.reason().find("ze iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("zeInit"), std::string::npos);
  EXPECT_NE(status.reason().find(fake().path), std::string::npos);
  EXPECT_NE(status.reason().find("ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)"), std::string::npos);
  EXPECT_NE(status.reason().find("no Level Zero GPU driver"), std::string::npos);

  int local = 0;
  EXPECT_EQ(iface_->query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_FALSE(iface_->device_count().ok());
  EXPECT_TRUE(iface_->library_path().empty());

  fake().set_failure("zeInit", 0);
  EXPECT_TRUE(iface_->init().ok());  // a failed init can be retried
}

TEST_F(ZeIfaceTest, NoDriverMeansNoDevice) {
  fake().set_driver_count(0);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);
  EXPECT_NE(status.reason().find("reports no driver"), std::string::npos) << status.reason();
}

TEST_F(ZeIfaceTest, DiscoveryFailureLeavesNoContextBehind) {
  fake().set_failure("zeDeviceGetProperties", kDeviceLost);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_NE(status.reason().find("zeDeviceGetProperties"), std::string::npos);
  EXPECT_EQ(fake().live_contexts(), 0);
}

TEST_F(ZeIfaceApi10Test, OldLoaderWorksWithoutItsOptionalCalls) {
  init();
  EXPECT_EQ(iface_->runtime_version(), "Level Zero API 1.0");
  Result<std::vector<ZeDeviceInfo>> devices = iface_->devices();
  ASSERT_TRUE(devices.ok());
  for (const ZeDeviceInfo& info : *devices) EXPECT_TRUE(info.pci_bus_id.empty());
  void* device = alloc(0, 0, 4096);
  Result<PointerInfo> info = iface_->query(device, 1);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->sys_dev.empty());

  // No zeCommandListHostSynchronize: the synchronous list alone must deliver the bytes.
  const char text[] = "api 1.0";
  char back[sizeof text] = {};
  ASSERT_TRUE(iface_->copy_to_device(device, text, sizeof text).ok());
  ASSERT_TRUE(iface_->copy_from_device(back, device, sizeof back).ok());
  EXPECT_STREQ(back, text);
}

TEST_F(ZeIfaceTest, UseBeforeInitIsRefused) {
  int local = 0;
  EXPECT_EQ(iface_->query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->export_dmabuf({&local, sizeof local}).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->capabilities(kDriver0Device0).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(&local, &local, 1).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(kDriver0Device0, 64, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_->mem_free(&local).code(), HMR_EINVAL);
  EXPECT_FALSE(iface_->devices().ok());
  EXPECT_EQ(fake().call_count("zeInit"), 0);
}

TEST_F(ZeIfaceTest, MissingLibraryMeansIfaceUnavailable) {
  setenv("HMR_ZE_LIBRARY", "/nonexistent/hmr/libze_loader.so.1", 1);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_NE(status.reason().find("ze iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("/nonexistent/hmr/libze_loader.so.1"), std::string::npos);
  EXPECT_NE(status.reason().find("HMR_ZE_LIBRARY"), std::string::npos);

  int local = 0;
  EXPECT_FALSE(iface_->query(&local, sizeof local).ok());
  EXPECT_FALSE(iface_->export_dmabuf({&local, sizeof local}).ok());
  EXPECT_FALSE(iface_->capabilities(kDriver0Device0).ok());
}

TEST_F(ZeIfaceTest, ALibraryThatIsNotLevelZeroIsRefusedByName) {
  setenv("HMR_ZE_LIBRARY", HMR_FAKE_HSA_PATH, 1);  // a real shared object, but ROCr's
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_NE(status.reason().find("lacks required symbol zeInit"), std::string::npos)
      << status.reason();
}

}  // namespace
}  // namespace hmr::ze
