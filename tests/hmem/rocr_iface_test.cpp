// The ROCr iface against the fake runtime (tests/fakes/fake_hsa.c), loaded the way a user points
// hmr at a runtime: HMR_ROCR_LIBRARY.
#include "rocr/rocr_iface.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "hmem/page_range.h"
#include "tests/hmem/export_checks.h"
#include "tests/hmem/rocr_fake_library.h"
#include "tests/hmem/rocr_iface_fixture.h"
#include "tests/hmem/rocr_temp_file.h"

namespace hmr::rocr {
namespace {

using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::FakeHsa;
using hmr::testing::fake_hsa;
using hmr::testing::fake_hsa_rocm52;
using hmr::testing::expect_exports_leak_no_fd;
using hmr::testing::open_fd_count;
using hmr::testing::TempFile;

constexpr int kError = 0x1000;
constexpr int kOutOfResources = 0x1008;
constexpr size_t kFakeGranule = 64 << 10;  // the fake's VRAM allocation granularity

struct FreeLog {
  struct Event {
    void* context;
    uint64_t base;
    size_t len;
  };
  std::vector<Event> events;
  static void record(void* context, uint64_t base, size_t len) {
    static_cast<FreeLog*>(static_cast<void**>(context)[0])->events.push_back({context, base, len});
  }
};

class RocrIfaceTest : public hmr::testing::RocrIfaceFixture {};

class RocrIfaceRocm52Test : public RocrIfaceTest {
 protected:
  const FakeHsa& fake() const override { return fake_hsa_rocm52(); }
};

// Page-aligned host memory the test owns.
struct HostPages {
  explicit HostPages(size_t bytes)
      : ptr(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
        len(bytes) {}
  ~HostPages() { munmap(ptr, len); }
  char* bytes() const { return static_cast<char*>(ptr); }
  void* ptr;
  size_t len;
};

TEST_F(RocrIfaceTest, InitLoadsTheOverrideAndCountsGpus) {
  init();
  EXPECT_EQ(iface_->library_path(), fake().path);
  EXPECT_EQ(iface_->runtime_version(), "HSA 1.1, ROCr build fake-rocr-5.7");
  Result<int> count = iface_->device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_HSA_GPU_COUNT);
  EXPECT_EQ(iface_->free_tracking(), hmem::Iface::FreeTracking::free_events);
  EXPECT_TRUE(iface_->init().ok());  // a second init is a no-op
  EXPECT_EQ(fake().call_count("hsa_init"), 1);
  EXPECT_EQ(fake().init_count(), 1);
  iface_.reset();
  EXPECT_EQ(fake().init_count(), 0);  // hsa_shut_down balanced it
}

TEST_F(RocrIfaceTest, QueryDescribesTheWholeDeviceAllocation) {
  init();
  const size_t size = (1u << 20) + 123;
  auto* base = static_cast<char*>(alloc(1, size));
  Result<PointerInfo> info = iface_->query(base + 4096 + 7, 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_ROCR);
  EXPECT_EQ(info->device, DeviceId{1});
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(base));
  EXPECT_EQ(info->alloc_len, size);
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_EQ(info->alloc_id, 0u);  // ROCr has none: frees are watched instead
  EXPECT_EQ(info->sys_dev, "0001:c3:01.0");  // domain 1, bus c3, device 1, function 0
}

TEST_F(RocrIfaceTest, GpusHaveDistinctRangesAndDeviceIds) {
  init();
  void* on0 = alloc(0, 4096);
  void* on1 = alloc(1, 4096);
  EXPECT_NE(on0, on1);
  Result<PointerInfo> first = iface_->query(on0, 1);
  Result<PointerInfo> second = iface_->query(on1, 1);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->device, DeviceId{0});
  EXPECT_EQ(second->device, DeviceId{1});
  EXPECT_EQ(first->sys_dev, "0000:23:00.0");
}

TEST_F(RocrIfaceTest, HostPointerIsNotRocrMemory) {
  init();
  std::vector<char> host(4096);
  Result<PointerInfo> info = iface_->query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT);
  EXPECT_NE(info.status().reason().find("not ROCr memory"), std::string::npos);
}

TEST_F(RocrIfaceTest, RangeOutsideOneAllocationIsRejected) {
  init();
  auto* base = static_cast<char*>(alloc(0, 8192));
  Result<PointerInfo> info = iface_->query(base + 4096, 8192);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EINVAL);
  EXPECT_NE(info.status().reason().find("not inside one ROCr allocation"), std::string::npos);
  EXPECT_EQ(iface_->query(base, 0).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->query(base, SIZE_MAX).status().code(), HMR_EINVAL);  // wraps
}

TEST_F(RocrIfaceTest, SystemPoolMemoryIsManaged) {
  init();
  void* managed = alloc(-1, 4096);
  Result<PointerInfo> info = iface_->query(managed, 8);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, MemoryKind::managed);
  EXPECT_EQ(info->device, DeviceId{0});
  EXPECT_TRUE(info->sys_dev.empty());
}

TEST_F(RocrIfaceTest, PinnedHostMemoryIsHostAllocAtItsHostAddress) {
  init();
  HostPages host(4 * 4096);
  ASSERT_TRUE(iface_->host_register(host.ptr, host.len).ok());
  Result<PointerInfo> info = iface_->query(host.bytes() + 5000, 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, MemoryKind::host_alloc);
  // The runtime also reports where the GPU sees it; the base is the address the caller used.
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(host.ptr));
  EXPECT_EQ(info->alloc_len, host.len);
  ASSERT_TRUE(iface_->host_unregister(host.ptr).ok());
  EXPECT_EQ(iface_->query(host.ptr, 1).status().code(), HMR_ENOENT);
}

TEST_F(RocrIfaceTest, QueryFailureFailsClosed) {
  init();
  fake().set_failure("hsa_amd_pointer_info", kError);
  std::vector<char> host(64);
  Result<PointerInfo> info = iface_->query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_EIO);  // not HMR_ENOENT: never "so it is host memory"
  EXPECT_NE(info.status().reason().find("hsa_amd_pointer_info"), std::string::npos);
}

TEST_F(RocrIfaceTest, ExportCoversWholePagesWithTheRightOffset) {
  init();
  const size_t page = hmem::host_page_size();
  auto* base = static_cast<char*>(alloc(0, 16 * page));
  char* address = base + 3 * page + 100;  // not page aligned
  std::vector<char> pattern(2 * page);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 7 + 1);
  ASSERT_TRUE(iface_->copy_to_device(address, pattern.data(), pattern.size()).ok());

  Result<DmabufExport> exported = iface_->export_dmabuf({address, 2 * page});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_TRUE(exported->fd.valid());
  // The fake's dma-buf is the whole buffer object: the runtime put the exported pages 3 pages
  // in, and the bytes start 100 bytes into those.
  EXPECT_EQ(exported->offset, 3 * page + 100);
  EXPECT_EQ(exported->len, 2 * page);
  const size_t buffer_object = (16 * page + kFakeGranule - 1) / kFakeGranule * kFakeGranule;
  EXPECT_EQ(exported->exported_len, buffer_object);

  const void* asked = nullptr;
  size_t asked_size = 0;
  fake().last_export(&asked, &asked_size);
  EXPECT_EQ(asked, base + 3 * page);  // whole pages, as RCCL exports them
  EXPECT_EQ(asked_size, 3 * page);

  // The fd really holds the device's bytes at the offset a NIC would register.
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

TEST_F(RocrIfaceTest, OnlyDeviceMemoryIsExported) {
  init();
  Result<DmabufExport> managed = iface_->export_dmabuf({alloc(-1, 1 << 16), 4096});
  ASSERT_FALSE(managed.ok());
  EXPECT_EQ(managed.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(managed.status().reason().find("managed"), std::string::npos);

  HostPages host(4096);
  ASSERT_TRUE(iface_->host_register(host.ptr, host.len).ok());
  Result<DmabufExport> pinned = iface_->export_dmabuf({host.ptr, host.len});
  EXPECT_EQ(pinned.status().code(), HMR_EOPNOTSUPP);
  ASSERT_TRUE(iface_->host_unregister(host.ptr).ok());

  std::vector<char> plain(64);
  EXPECT_EQ(iface_->export_dmabuf({plain.data(), plain.size()}).status().code(), HMR_ENOENT);
  EXPECT_EQ(fake().call_count("hsa_amd_portable_export_dmabuf"), 0);
}

TEST_F(RocrIfaceTest, ExportsLeakNoFd) {
  init();
  auto* base = static_cast<char*>(alloc(0, 1 << 20));
  const int before = open_fd_count();
  ASSERT_NO_FATAL_FAILURE(expect_exports_leak_no_fd(*iface_, base, 4096));

  // A failed export leaves nothing open either.
  fake().set_failure("hsa_amd_portable_export_dmabuf", kOutOfResources);
  Result<DmabufExport> failed = iface_->export_dmabuf({base, 4096});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_ENOMEM);
  EXPECT_NE(failed.status().reason().find("hsa_amd_portable_export_dmabuf"), std::string::npos);
  EXPECT_EQ(open_fd_count(), before);
}

TEST_F(RocrIfaceTest, CapabilitiesArePerDeviceAndSayWhy) {
  init();
  for (uint64_t device : {0u, 1u}) {
    Result<DeviceCapabilities> caps = iface_->capabilities(DeviceId{device});
    ASSERT_TRUE(caps.ok());
    EXPECT_EQ(caps->device, DeviceId{device});
    EXPECT_EQ(caps->sys_dev, device == 0 ? "0000:23:00.0" : "0001:c3:01.0");
    EXPECT_TRUE(caps->dmabuf.supported) << caps->dmabuf.reason;
    EXPECT_TRUE(caps->dmabuf.reason.empty());
    EXPECT_FALSE(caps->peer_direct.supported);
    EXPECT_FALSE(caps->peer_direct.reason.empty());
    EXPECT_FALSE(caps->ipc.supported);
    EXPECT_FALSE(caps->ipc.reason.empty());
  }
  Result<DeviceCapabilities> missing = iface_->capabilities(DeviceId{2});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), HMR_EINVAL);
}

TEST_F(RocrIfaceTest, UntrustedKernelRefusesExport) {
  TempFile config("config-p2p-only", "CONFIG_PCI_P2PDMA=y\n# CONFIG_DMABUF_MOVE_NOTIFY is not set\n");
  iface_ = std::make_unique<RocrIface>(KernelConfigSources{config.path(), "/nonexistent"});
  init();
  Result<DeviceCapabilities> caps = iface_->capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_FALSE(caps->dmabuf.supported);
  EXPECT_NE(caps->dmabuf.reason.find("CONFIG_DMABUF_MOVE_NOTIFY=y"), std::string::npos)
      << caps->dmabuf.reason;
  Result<DmabufExport> exported = iface_->export_dmabuf({alloc(0, 4096), 4096});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(exported.status().reason().find("CONFIG_DMABUF_MOVE_NOTIFY"), std::string::npos);
  EXPECT_EQ(fake().call_count("hsa_amd_portable_export_dmabuf"), 0);
}

TEST_F(RocrIfaceTest, RuntimeWithoutDmabufSupportSaysSo) {
  fake().set_dmabuf_supported(0);
  init();
  Result<DeviceCapabilities> caps = iface_->capabilities(DeviceId{1});
  ASSERT_TRUE(caps.ok());
  EXPECT_FALSE(caps->dmabuf.supported);
  EXPECT_NE(caps->dmabuf.reason.find("DMABUF_SUPPORTED = false"), std::string::npos);
  EXPECT_EQ(iface_->export_dmabuf({alloc(1, 4096), 4096}).status().code(), HMR_EOPNOTSUPP);
}

TEST_F(RocrIfaceRocm52Test, OldRuntimeWorksWithoutDmabufExport) {
  init();
  EXPECT_EQ(iface_->runtime_version(), "HSA 1.1, ROCr build fake-rocr-5.2");
  Result<DeviceCapabilities> caps = iface_->capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_FALSE(caps->dmabuf.supported);
  EXPECT_NE(caps->dmabuf.reason.find("hsa_amd_portable_export_dmabuf"), std::string::npos);
  EXPECT_NE(caps->dmabuf.reason.find("ROCm 5.6"), std::string::npos);

  void* device = alloc(0, 4096);
  Result<PointerInfo> info = iface_->query(device, 64);  // queries still work
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  Result<DmabufExport> exported = iface_->export_dmabuf({device, 64});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP);
  EXPECT_NE(exported.status().reason().find("hsa_amd_portable_export_dmabuf"), std::string::npos);
}

TEST_F(RocrIfaceTest, CopiesMoveBytesBothWays) {
  init();
  Result<void*> device = iface_->mem_alloc(DeviceId{1}, 3 * 4096, MemoryKind::device_only);
  ASSERT_TRUE(device.ok()) << device.status().reason();
  auto* base = static_cast<char*>(*device);
  std::vector<char> out(5000);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i % 251);
  ASSERT_TRUE(iface_->copy_to_device(base + 1000, out.data(), out.size()).ok());

  std::vector<char> seen(out.size());
  ASSERT_EQ(fake().read(base + 1000, seen.data(), seen.size()), 0);  // the fake's own view
  EXPECT_EQ(seen, out);
  std::vector<char> back(out.size());
  ASSERT_TRUE(iface_->copy_from_device(back.data(), base + 1000, back.size()).ok());
  EXPECT_EQ(back, out);

  // Past the allocation: the runtime refuses, and the reason names the call.
  Status past = iface_->copy_to_device(base + 3 * 4096 - 10, out.data(), 100);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.code(), HMR_EINVAL);
  EXPECT_NE(past.reason().find("hsa_memory_copy"), std::string::npos);
  EXPECT_TRUE(iface_->mem_free(base).ok());
}

TEST_F(RocrIfaceTest, CopiesRejectBadArguments) {
  init();
  void* device = alloc(0, 4096);
  char host[16] = {};
  EXPECT_EQ(iface_->copy_to_device(nullptr, host, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(device, nullptr, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(device, host, 0).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_from_device(nullptr, device, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_from_device(host, nullptr, sizeof host).code(), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("hsa_memory_copy"), 0);
  fake().set_failure("hsa_memory_copy", kOutOfResources);
  Status failed = iface_->copy_from_device(host, device, sizeof host);
  EXPECT_EQ(failed.code(), HMR_ENOMEM);
  EXPECT_NE(failed.reason().find("HSA_STATUS_ERROR_OUT_OF_RESOURCES"), std::string::npos);
}

TEST_F(RocrIfaceTest, MemAllocGivesEachKindAndFreesIt) {
  init();
  Result<void*> device = iface_->mem_alloc(DeviceId{1}, 4096, MemoryKind::device_only);
  Result<void*> managed = iface_->mem_alloc(DeviceId{0}, 4096, MemoryKind::managed);
  Result<void*> pinned = iface_->mem_alloc(DeviceId{0}, 100, MemoryKind::host_alloc);
  ASSERT_TRUE(device.ok() && managed.ok() && pinned.ok());

  EXPECT_EQ(iface_->query(*device, 1)->kind, MemoryKind::device_only);
  EXPECT_EQ(iface_->query(*device, 1)->device, DeviceId{1});
  EXPECT_EQ(iface_->query(*managed, 1)->kind, MemoryKind::managed);
  EXPECT_EQ(fake().allowed_agents(*managed), FAKE_HSA_GPU_COUNT);  // every GPU may reach it
  EXPECT_EQ(iface_->query(*pinned, 100)->kind, MemoryKind::host_alloc);
  std::memset(*pinned, 0x5a, 100);  // host memory: the CPU may touch it

  for (void* ptr : {*device, *managed, *pinned}) {
    ASSERT_TRUE(iface_->mem_free(ptr).ok());
    EXPECT_EQ(iface_->query(ptr, 1).status().code(), HMR_ENOENT);
  }
}

TEST_F(RocrIfaceTest, MemAllocRejectsBadArguments) {
  init();
  EXPECT_EQ(iface_->mem_alloc(DeviceId{2}, 4096, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(DeviceId{0}, 0, MemoryKind::device_only).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(DeviceId{0}, 4096, MemoryKind::host).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->mem_free(nullptr).code(), HMR_EINVAL);
  std::vector<char> host(64);
  Status not_ours = iface_->mem_free(host.data());
  EXPECT_EQ(not_ours.code(), HMR_EINVAL);
  EXPECT_NE(not_ours.reason().find("hsa_amd_memory_pool_free"), std::string::npos);

  fake().set_failure("hsa_amd_memory_pool_allocate", kOutOfResources);
  Result<void*> failed = iface_->mem_alloc(DeviceId{0}, 4096, MemoryKind::device_only);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_ENOMEM);

  // Sharing failed: the allocation is given back, not leaked.
  fake().set_failure("hsa_amd_memory_pool_allocate", 0);
  fake().set_failure("hsa_amd_agents_allow_access", kError);
  const int frees = fake().call_count("hsa_amd_memory_pool_free");
  EXPECT_FALSE(iface_->mem_alloc(DeviceId{0}, 4096, MemoryKind::managed).ok());
  EXPECT_EQ(fake().call_count("hsa_amd_memory_pool_free"), frees + 1);

  // Pinning failed: the host pages are unmapped and nothing is recorded.
  fake().set_failure("hsa_amd_memory_lock", kOutOfResources);
  EXPECT_EQ(iface_->mem_alloc(DeviceId{0}, 4096, MemoryKind::host_alloc).status().code(),
            HMR_ENOMEM);
}

TEST_F(RocrIfaceTest, HostRegistrationRejectsBadArguments) {
  init();
  HostPages host(4096);
  EXPECT_EQ(iface_->host_register(nullptr, 4096).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->host_register(host.ptr, 0).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->host_unregister(nullptr).code(), HMR_EINVAL);
  Status never = iface_->host_unregister(host.ptr);
  EXPECT_EQ(never.code(), HMR_EINVAL);
  EXPECT_NE(never.reason().find("hsa_amd_memory_unlock"), std::string::npos);
  // Device memory is already the runtime's.
  EXPECT_EQ(iface_->host_register(alloc(0, 4096), 4096).code(), HMR_EINVAL);
}

TEST_F(RocrIfaceTest, FreeCallbacksFireOnceOnFree) {
  init();
  auto* base = static_cast<char*>(alloc(1, 1 << 20));
  Result<PointerInfo> info = iface_->query(base + 100, 10);
  ASSERT_TRUE(info.ok());
  FreeLog log;
  void* first[] = {&log};
  void* second[] = {&log};
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, first).ok());
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, second).ok());
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, first).ok());  // idempotent
  EXPECT_EQ(fake().notifier_count(), 1);  // one runtime registration per allocation
  EXPECT_TRUE(log.events.empty());

  free_allocation(base);
  ASSERT_EQ(log.events.size(), 2u);
  for (const FreeLog::Event& event : log.events) {
    EXPECT_EQ(event.base, reinterpret_cast<uintptr_t>(base));
    EXPECT_EQ(event.len, size_t{1} << 20);
  }
  EXPECT_NE(log.events[0].context, log.events[1].context);
  EXPECT_EQ(fake().notifier_count(), 0);

  // A new allocation at the same address is not watched by the old watchers.
  void* again = alloc(1, 1 << 20);
  ASSERT_EQ(again, base);
  free_allocation(again);
  EXPECT_EQ(log.events.size(), 2u);
}

TEST_F(RocrIfaceTest, UnwatchedAllocationFiresNothing) {
  init();
  void* base = alloc(0, 4096);
  Result<PointerInfo> info = iface_->query(base, 1);
  ASSERT_TRUE(info.ok());
  FreeLog log;
  void* kept[] = {&log};
  void* dropped[] = {&log};
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, kept).ok());
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, dropped).ok());
  ASSERT_TRUE(iface_->unwatch_free(*info, dropped).ok());
  ASSERT_TRUE(iface_->unwatch_free(*info, dropped).ok());  // idempotent
  free_allocation(base);
  ASSERT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.events[0].context, static_cast<void*>(kept));

  void* other = alloc(0, 4096);
  Result<PointerInfo> other_info = iface_->query(other, 1);
  ASSERT_TRUE(other_info.ok());
  ASSERT_TRUE(iface_->watch_free(*other_info, &FreeLog::record, kept).ok());
  ASSERT_TRUE(iface_->unwatch_free(*other_info, kept).ok());
  free_allocation(other);
  EXPECT_EQ(log.events.size(), 1u);
}

TEST_F(RocrIfaceTest, ShutdownDeregistersFreeCallbacks) {
  init();
  void* base = alloc(0, 4096);
  Result<PointerInfo> info = iface_->query(base, 1);
  ASSERT_TRUE(info.ok());
  FreeLog log;
  void* context[] = {&log};
  ASSERT_TRUE(iface_->watch_free(*info, &FreeLog::record, context).ok());
  EXPECT_EQ(fake().notifier_count(), 1);
  iface_.reset();
  EXPECT_EQ(fake().notifier_count(), 0);  // the runtime holds no pointer into a dead iface
  EXPECT_EQ(fake().init_count(), 0);
  free_allocation(base);
  EXPECT_TRUE(log.events.empty());
}

TEST_F(RocrIfaceTest, WatchRejectsBadArgumentsAndReportsRuntimeFailures) {
  init();
  void* base = alloc(0, 4096);
  Result<PointerInfo> info = iface_->query(base, 1);
  ASSERT_TRUE(info.ok());
  FreeLog log;
  void* context[] = {&log};
  EXPECT_EQ(iface_->watch_free(*info, nullptr, context).code(), HMR_EINVAL);
  PointerInfo other = *info;
  other.iface = HMR_HMEM_CUDA;
  EXPECT_EQ(iface_->watch_free(other, &FreeLog::record, context).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->unwatch_free(other, context).code(), HMR_EINVAL);
  PointerInfo no_base = *info;
  no_base.base = 0;
  EXPECT_EQ(iface_->watch_free(no_base, &FreeLog::record, context).code(), HMR_EINVAL);

  fake().set_failure("hsa_amd_register_deallocation_callback", kOutOfResources);
  Status failed = iface_->watch_free(*info, &FreeLog::record, context);
  EXPECT_EQ(failed.code(), HMR_ENOMEM);
  EXPECT_NE(failed.reason().find("hsa_amd_register_deallocation_callback"), std::string::npos);
  fake().set_failure("hsa_amd_register_deallocation_callback", 0);

  // A freed allocation cannot be watched: the runtime no longer knows the address.
  free_allocation(base);
  EXPECT_EQ(iface_->watch_free(*info, &FreeLog::record, context).code(), HMR_EINVAL);
  EXPECT_TRUE(log.events.empty());
}

TEST_F(RocrIfaceTest, InitFailureFailsClosedWithTheRuntimeError) {
  fake().set_failure("hsa_init", kOutOfResources);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);  // ROCr's "no usable GPU", not "out of memory"
  EXPECT_NE(status.reason().find("rocr iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("hsa_init"), std::string::npos);
  EXPECT_NE(status.reason().find(fake().path), std::string::npos);
  EXPECT_NE(status.reason().find("0x1008"), std::string::npos);
  EXPECT_NE(status.reason().find("fake: out of resources"), std::string::npos);  // runtime's text
  EXPECT_NE(status.reason().find("/dev/kfd"), std::string::npos);

  // Unusable, but never a crash and never "host memory".
  int local = 0;
  EXPECT_EQ(iface_->query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_FALSE(iface_->device_count().ok());
  EXPECT_TRUE(iface_->library_path().empty());
  EXPECT_TRUE(iface_->runtime_version().empty());

  fake().set_failure("hsa_init", 0);
  EXPECT_TRUE(iface_->init().ok());  // a failed init can be retried
}

TEST_F(RocrIfaceTest, NoGpuAgentMeansNoDevice) {
  fake().set_gpu_count(0);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);
  EXPECT_NE(status.reason().find("no GPU agent"), std::string::npos) << status.reason();
  EXPECT_EQ(fake().init_count(), 0);  // hsa_init was balanced
}

TEST_F(RocrIfaceTest, AgentDiscoveryFailureBalancesInit) {
  fake().set_failure("hsa_iterate_agents", kError);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_NE(status.reason().find("hsa_iterate_agents"), std::string::npos);
  EXPECT_EQ(fake().init_count(), 0);
}

TEST_F(RocrIfaceTest, UseBeforeInitIsRefused) {
  int local = 0;
  EXPECT_EQ(iface_->query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->export_dmabuf({&local, sizeof local}).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->capabilities(DeviceId{0}).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->copy_to_device(&local, &local, 1).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->host_register(&local, sizeof local).code(), HMR_EINVAL);
  EXPECT_EQ(iface_->mem_alloc(DeviceId{0}, 64, MemoryKind::device_only).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_->watch_free(PointerInfo{}, &FreeLog::record, nullptr).code(), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("hsa_init"), 0);
}

TEST_F(RocrIfaceTest, MissingLibraryMeansIfaceUnavailable) {
  setenv("HMR_ROCR_LIBRARY", "/nonexistent/hmr/libhsa-runtime64.so.1", 1);
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_NE(status.reason().find("rocr iface unavailable"), std::string::npos) << status.reason();
  EXPECT_NE(status.reason().find("/nonexistent/hmr/libhsa-runtime64.so.1"), std::string::npos);
  EXPECT_NE(status.reason().find("HMR_ROCR_LIBRARY"), std::string::npos);
  EXPECT_TRUE(iface_->library_path().empty());

  int local = 0;
  EXPECT_FALSE(iface_->query(&local, sizeof local).ok());
  EXPECT_FALSE(iface_->export_dmabuf({&local, sizeof local}).ok());
  EXPECT_FALSE(iface_->capabilities(DeviceId{0}).ok());
  EXPECT_FALSE(iface_->copy_from_device(&local, &local, 1).ok());
}

TEST_F(RocrIfaceTest, ALibraryThatIsNotRocrIsRefusedByName) {
  setenv("HMR_ROCR_LIBRARY", HMR_FAKE_ZE_PATH, 1);  // a real shared object, but Level Zero's
  Status status = iface_->init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_NE(status.reason().find("lacks required symbol hsa_init"), std::string::npos)
      << status.reason();
}

}  // namespace
}  // namespace hmr::rocr
