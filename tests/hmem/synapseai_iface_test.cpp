// The SynapseAI iface against the fake libSynapse.so, libhl-thunk.so and libscal.so
// (tests/fakes/fake_synapse.c, fake_hlthunk.c, fake_scal.c), loaded the way a user points hmr
// at them: HMR_SYNAPSEAI_LIBRARY, HMR_HLTHUNK_LIBRARY and HMR_SCAL_LIBRARY.
#include "synapseai/synapseai_iface.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hmem/page_range.h"
#include "tests/hmem/export_checks.h"
#include "tests/hmem/synapseai_fake_library.h"

namespace hmr::synapseai {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::fake_hlthunk;
using hmr::testing::fake_hlthunk_noexport_path;
using hmr::testing::fake_hlthunk_path;
using hmr::testing::fake_scal;
using hmr::testing::fake_scal_path;
using hmr::testing::fake_synapse;
using hmr::testing::fake_synapse_path;
using hmr::testing::fd_size;
using hmr::testing::expect_exports_leak_no_fd;
using hmr::testing::open_fd_count;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const void* as_pointer(uint64_t address) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

void* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

class SynapseaiIfaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HMR_SYNAPSEAI_LIBRARY", fake_synapse_path(), 1);
    use_hlthunk(fake_hlthunk_path());
    setenv("HMR_SCAL_LIBRARY", fake_scal_path(), 1);
    unsetenv(kHcclDmabufVariable);
    fake_synapse().reset();
    fake_scal().reset();
    fake_hlthunk(fake_hlthunk_path()).reset();
    fake_hlthunk(fake_hlthunk_noexport_path()).reset();
    // Each rank names its device, as SynapseAI's launchers do: device 0 here.
    setenv("HLS_MODULE_ID", std::to_string(FAKE_HLTHUNK_MODULE_ID_0).c_str(), 1);
    fds_at_start_ = open_fd_count();
  }
  void TearDown() override {
    iface_.reset();
    for (uint64_t address : app_allocations_) fake_synapse().free(address);
    fake_synapse().reset();  // HCCL tears down, closing its own gaudi-direct fd
    fake_scal().reset();
    // The device a test held as SynapseAI does (acquire_as_synapse) is released.
    fake_hlthunk(fake_hlthunk_path()).reset();
    EXPECT_EQ(open_fd_count(), fds_at_start_);  // the device fd and every export were closed
    EXPECT_EQ(fake_synapse().call_count("synDestroy"), 0);  // never: it hangs without a device
    unsetenv("HMR_SYNAPSEAI_LIBRARY");
    unsetenv("HMR_HLTHUNK_LIBRARY");
    unsetenv("HMR_SCAL_LIBRARY");
    unsetenv(kHcclDmabufVariable);
    unsetenv("HLS_MODULE_ID");
  }

  void use_hlthunk(const char* path) {
    hlthunk_path_ = path;
    setenv("HMR_HLTHUNK_LIBRARY", path, 1);
  }
  const testing::FakeHlthunk& hlthunk() const { return fake_hlthunk(hlthunk_path_); }
  SynapseaiIface& iface() { return *iface_; }

  void init() { ASSERT_TRUE(iface().init().ok()); }

  void* alloc(size_t len) {
    Result<void*> ptr = iface().mem_alloc(DeviceId{0}, len, MemoryKind::device_only);
    EXPECT_TRUE(ptr.ok()) << ptr.status().reason();
    return ptr.ok() ? *ptr : nullptr;
  }
  // The application acquires Gaudi device 0 as SynapseAI really holds one: a device fd opened
  // through hl-thunk, the device's memory mapped once, its "global_hbm" pool set up by SCAL a
  // granule above the mapping's start (so a caller that names the mapping by the pool's start
  // is refused, as by the driver).  Its app_alloc(0, ...) memory then lies in that pool.
  struct HeldDevice {
    int fd = -1;
    uint64_t mapping_start = 0;
    uint64_t pool_base = 0;
    uint64_t pool_size = 0;
  };
  HeldDevice acquire_as_synapse() {
    constexpr uint64_t kGranule = 2ull << 20;
    HeldDevice held;
    held.pool_size = 16ull << 20;
    const testing::FakeHlthunk& thunk = fake_hlthunk(fake_hlthunk_path());
    held.fd = thunk.open(HLTHUNK_DEVICE_DONT_CARE, nullptr);
    EXPECT_GE(held.fd, 0);
    const uint64_t handle = thunk.memory_alloc(held.fd, held.pool_size + kGranule, 0, true, false);
    EXPECT_NE(handle, 0u);
    held.mapping_start = thunk.memory_map(held.fd, handle, 0);
    EXPECT_NE(held.mapping_start, 0u);
    held.pool_base = held.mapping_start + kGranule;
    EXPECT_EQ(fake_scal().attach(held.fd, held.mapping_start, held.pool_base, held.pool_size), 0);
    EXPECT_EQ(fake_synapse().acquire_mapped(0, held.fd, held.pool_base, held.pool_size), 0);
    return held;
  }
  // Memory the application allocated is exported through HCCL only: SCAL missing, the
  // application saying its HCCL is set up.  Before init().
  void only_hccl_exports() {
    setenv("HMR_SCAL_LIBRARY", "/nonexistent/hmr/libscal.so", 1);
    setenv(kHcclDmabufVariable, "1", 1);
  }
  // Device memory as the application gets it from SynapseAI, not through hmr.
  uint64_t app_alloc(int device, size_t len) {
    uint64_t address = 0;
    EXPECT_EQ(fake_synapse().alloc(device, len, &address), 0);
    app_allocations_.push_back(address);
    return address;
  }

  const size_t page_ = hmem::host_page_size();
  const char* hlthunk_path_ = nullptr;
  int fds_at_start_ = 0;
  std::optional<SynapseaiIface> iface_{std::in_place};
  std::vector<uint64_t> app_allocations_;
};

TEST_F(SynapseaiIfaceTest, InitLoadsBothLibrariesAndOpensNoDevice) {
  init();
  EXPECT_EQ(iface().iface(), HMR_HMEM_SYNAPSEAI);
  EXPECT_EQ(iface().library_path(), fake_synapse_path());
  EXPECT_EQ(iface().hlthunk_path(), fake_hlthunk_path());
  EXPECT_EQ(iface().scal_path(), fake_scal_path());
  EXPECT_EQ(iface().runtime_version(), "1.19.0-fake");
  Result<int> count = iface().device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_SYNAPSE_DEVICE_COUNT);
  EXPECT_EQ(iface().free_tracking(), hmem::Iface::FreeTracking::explicit_only);
  // Gaudi devices are exclusive: init must leave them to the application.
  EXPECT_EQ(hlthunk().call_count("hlthunk_open"), 0);
  EXPECT_TRUE(iface().init().ok());  // a second init is a no-op
  EXPECT_EQ(fake_synapse().call_count("synInitialize"), 1);
}

TEST_F(SynapseaiIfaceTest, MissingSynapseLibraryMeansIfaceUnavailable) {
  setenv("HMR_SYNAPSEAI_LIBRARY", "/nonexistent/hmr/libSynapse.so", 1);
  Status status = iface().init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_TRUE(has(status.reason(), "synapseai iface unavailable")) << status.reason();
  EXPECT_TRUE(has(status.reason(), "/nonexistent/hmr/libSynapse.so"));
  EXPECT_TRUE(has(status.reason(), "HMR_SYNAPSEAI_LIBRARY"));
  EXPECT_TRUE(iface().library_path().empty());

  int local = 0;
  EXPECT_EQ(iface().query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_FALSE(iface().export_dmabuf({&local, sizeof local}).ok());
  EXPECT_FALSE(iface().capabilities(DeviceId{0}).ok());
  EXPECT_FALSE(iface().device_count().ok());
  EXPECT_FALSE(iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only).ok());
}

// hl-thunk is optional: without it hmr cannot allocate, and memory the application allocated
// exports through HCCL where the application allows that (the iface was unavailable, and with
// the application's libSynapse loaded every registration, host memory's too, was refused).
TEST_F(SynapseaiIfaceTest, MissingHlthunkLeavesOnlyHmrsOwnAllocationsUnavailable) {
  setenv("HMR_HLTHUNK_LIBRARY", "/nonexistent/hmr/libhl-thunk.so", 1);
  setenv(kHcclDmabufVariable, "1", 1);
  ASSERT_TRUE(iface().init().ok());
  EXPECT_EQ(iface().library_path(), fake_synapse_path());
  EXPECT_TRUE(iface().hlthunk_path().empty());
  EXPECT_EQ(*iface().device_count(), FAKE_SYNAPSE_DEVICE_COUNT);

  Result<void*> own = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
  ASSERT_FALSE(own.ok());
  EXPECT_EQ(own.status().code(), HMR_ENOSYS);
  EXPECT_TRUE(has(own.status().reason(), "/nonexistent/hmr/libhl-thunk.so"))
      << own.status().reason();
  EXPECT_TRUE(has(own.status().reason(), "HMR_HLTHUNK_LIBRARY"));

  ASSERT_EQ(fake_synapse().acquire(0), 0);
  const uint64_t app = app_alloc(0, 4 * page_);
  Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(app + page_), page_});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, app + page_ - fake_synapse().pool_start(0));
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok()) << caps.status().reason();
  EXPECT_TRUE(caps->dmabuf.supported);  // through HCCL
}

// With HABANA_DISABLE_DOUBLE_SYN_INITIALIZE set, SynapseAI answers a second synInitialize with
// synAlreadyInitialized (synapse_api.h): the runtime the application started is started, and
// the iface was refused as if it were not.
TEST_F(SynapseaiIfaceTest, AnApplicationThatRefusesADoubleInitializeHasItsRuntimeUsed) {
  setenv("HABANA_DISABLE_DOUBLE_SYN_INITIALIZE", "1", 1);
  using InitializeFn = int (*)();
  void* library = dlopen(fake_synapse_path(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  auto application_initialize =
      reinterpret_cast<InitializeFn>(dlsym(library, "synInitialize"));
  ASSERT_NE(application_initialize, nullptr);
  EXPECT_EQ(application_initialize(), synSuccess);  // the application's, first
  EXPECT_EQ(application_initialize(), synAlreadyInitialized);  // what hmr's meets
  const Status status = iface().init();
  unsetenv("HABANA_DISABLE_DOUBLE_SYN_INITIALIZE");
  dlclose(library);
  ASSERT_TRUE(status.ok()) << status.reason();
  EXPECT_EQ(*iface().device_count(), FAKE_SYNAPSE_DEVICE_COUNT);
}

// Gaudi devices are exclusive: a second thread's first allocation, while the first thread's
// open of the device was not yet published, opened it again, met EBUSY, and failed.  The
// fake holds the first thread between its open and its bus id read; the second thread is let
// run until it returns (it failed so before) or, waiting for the first, for 50 ms.
TEST_F(SynapseaiIfaceTest, FirstAllocationsOnTwoThreadsShareOneOpenOfTheDevice) {
  init();
  hlthunk().hold_bus_id_reads(1);
  Result<void*> first = make_error(HMR_EIO, "not run");
  Result<void*> second = make_error(HMR_EIO, "not run");
  std::thread opener([&] { first = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only); });
  while (hlthunk().bus_id_reads_waiting() == 0) std::this_thread::yield();
  std::atomic<bool> second_returned{false};
  std::thread other([&] {
    second = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
    second_returned.store(true);
  });
  const auto bound = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (!second_returned.load() && std::chrono::steady_clock::now() < bound) {
    std::this_thread::yield();
  }
  hlthunk().hold_bus_id_reads(0);
  opener.join();
  other.join();
  ASSERT_TRUE(first.ok()) << first.status().reason();
  ASSERT_TRUE(second.ok()) << second.status().reason();
  EXPECT_EQ(hlthunk().call_count("hlthunk_open_by_module_id"), 1);
  EXPECT_EQ(hlthunk().open_devices(), 1);
  EXPECT_EQ(iface().query(*second, 1)->sys_dev, "0000:33:00.0");
}

TEST_F(SynapseaiIfaceTest, InitErrorsFailClosedWithTheStatusName) {
  fake_synapse().set_failure("synInitialize", synNoDeviceFound);
  Status status = iface().init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENODEV);
  EXPECT_TRUE(has(status.reason(), "synInitialize")) << status.reason();
  EXPECT_TRUE(has(status.reason(), "synNoDeviceFound"));
  EXPECT_TRUE(has(status.reason(), fake_synapse_path()));

  fake_synapse().set_failure("synInitialize", 0);
  fake_synapse().set_failure("synDeviceGetCount", synFail);
  status = iface().init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_TRUE(has(status.reason(), "synDeviceGetCount")) << status.reason();

  fake_synapse().set_failure("synDeviceGetCount", 0);
  EXPECT_TRUE(iface().init().ok());  // a failed init can be retried
}

TEST_F(SynapseaiIfaceTest, QueryKnowsMemoryHmrAllocated) {
  init();
  void* first = alloc(3 * page_ + 5);
  void* second = alloc(page_);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(hlthunk().call_count("hlthunk_open"), 1);  // opened once, on first use

  Result<PointerInfo> info = iface().query(at(first, page_ + 9), 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_SYNAPSEAI);
  EXPECT_EQ(info->device, DeviceId{0});
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(first));
  EXPECT_EQ(info->alloc_len, 4 * page_);  // rounded up to whole host pages
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_EQ(info->sys_dev, "0000:33:00.0");
  EXPECT_NE(info->alloc_id, 0u);

  Result<PointerInfo> other = iface().query(second, page_);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->base, info->base);
  EXPECT_NE(other->alloc_id, info->alloc_id);
  EXPECT_EQ(hlthunk().live_mappings(), 2);
}

TEST_F(SynapseaiIfaceTest, AllocationsUseTheDeviceHlsModuleIdNames) {
  init();
  setenv("HLS_MODULE_ID", std::to_string(FAKE_HLTHUNK_MODULE_ID_1).c_str(), 1);
  void* ptr = alloc(page_);
  Result<PointerInfo> info = iface().query(ptr, 1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->sys_dev, "0000:9a:00.0");
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_EQ(caps->sys_dev, "0000:9a:00.0");  // device 0 is the one hl-thunk opened
  EXPECT_TRUE(iface().capabilities(DeviceId{1})->sys_dev.empty());
  EXPECT_EQ(hlthunk().call_count("hlthunk_open_by_module_id"), 1);
}

TEST_F(SynapseaiIfaceTest, ABusyNamedDeviceFailsWithAReason) {
  init();
  hlthunk().set_busy(0, 1);  // the device HLS_MODULE_ID names: another process holds it
  Result<void*> refused = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), HMR_EBUSY);
  EXPECT_TRUE(has(refused.status().reason(), "hlthunk_open_by_module_id"))
      << refused.status().reason();
  EXPECT_TRUE(has(refused.status().reason(), "exclusive"));
  EXPECT_EQ(hlthunk().open_devices(), 0);  // and no other device instead

  hlthunk().set_busy(0, 0);  // the failure is not remembered
  EXPECT_TRUE(iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only).ok());
}

// hlthunk_open(DONT_CARE) opens the first free device (hl-thunk's libhlthunk.c): with several on
// the host, that is another rank's before it acquires it.  hmr opens none unless one is named.
TEST_F(SynapseaiIfaceTest, WithSeveralDevicesAndNoneNamedHmrOpensNone) {
  unsetenv("HLS_MODULE_ID");
  init();
  Result<void*> refused = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(refused.status().reason(), "HLS_MODULE_ID")) << refused.status().reason();
  EXPECT_EQ(hlthunk().open_devices(), 0);

  setenv("HLS_MODULE_ID", "99", 1);  // no device has it
  EXPECT_EQ(iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only).status().code(),
            HMR_ENODEV);
  EXPECT_EQ(hlthunk().open_devices(), 0);
}

TEST_F(SynapseaiIfaceTest, MemoryHmrDidNotAllocateIsNotSynapseMemoryToQuery) {
  init();
  std::vector<char> host(4096);
  Result<PointerInfo> info = iface().query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT);
  EXPECT_TRUE(has(info.status().reason(), "declare")) << info.status().reason();
  EXPECT_EQ(iface().query(as_pointer(app_alloc(1, page_)), 64).status().code(), HMR_ENOENT);
}

TEST_F(SynapseaiIfaceTest, BadRangesAreRejected) {
  init();
  void* base = alloc(2 * page_);
  EXPECT_EQ(iface().query(base, 0).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface().query(at(base, page_), 2 * page_).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface().query(as_pointer(UINT64_MAX - 8), 64).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface().export_dmabuf({base, 0}).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface().export_dmabuf({at(base, page_), 2 * page_}).status().code(), HMR_EINVAL);
}

TEST_F(SynapseaiIfaceTest, FreeUnmapsThenFreesAndReallocationGetsANewIdentity) {
  init();
  void* first = alloc(4 * page_);
  Result<PointerInfo> before = iface().query(first, 64);
  ASSERT_TRUE(before.ok());
  // The fake, like the driver, refuses to free mapped memory: success means unmap came first.
  ASSERT_TRUE(iface().mem_free(first).ok());
  EXPECT_EQ(hlthunk().call_count("hlthunk_memory_unmap"), 1);
  EXPECT_EQ(hlthunk().call_count("hlthunk_device_memory_free"), 1);
  EXPECT_EQ(hlthunk().live_handles(), 0);
  EXPECT_EQ(iface().query(first, 64).status().code(), HMR_ENOENT);

  void* second = alloc(4 * page_);
  ASSERT_EQ(second, first);  // the fake reuses the lowest free address
  Result<PointerInfo> after = iface().query(second, 64);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->alloc_id, before->alloc_id);
}

TEST_F(SynapseaiIfaceTest, MemAllocAndFreeRejectBadArguments) {
  init();
  EXPECT_EQ(iface().mem_alloc(DeviceId{0}, 0, MemoryKind::device_only).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface().mem_alloc(DeviceId{0}, SIZE_MAX, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface().mem_alloc(DeviceId{2}, page_, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  Result<void*> other_device = iface().mem_alloc(DeviceId{1}, page_, MemoryKind::device_only);
  EXPECT_EQ(other_device.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(other_device.status().reason(), "device 0")) << other_device.status().reason();
  for (MemoryKind kind : {MemoryKind::host_alloc, MemoryKind::managed, MemoryKind::host}) {
    Result<void*> wrong = iface().mem_alloc(DeviceId{0}, page_, kind);
    EXPECT_EQ(wrong.status().code(), HMR_EOPNOTSUPP);
    EXPECT_TRUE(has(wrong.status().reason(), hmem::memory_kind_name(kind)));
  }
  EXPECT_EQ(hlthunk().call_count("hlthunk_open"), 0);

  void* base = alloc(2 * page_);
  int local = 0;
  EXPECT_EQ(iface().mem_free(&local).code(), HMR_EINVAL);
  EXPECT_EQ(iface().mem_free(nullptr).code(), HMR_EINVAL);
  EXPECT_EQ(iface().mem_free(at(base, page_)).code(), HMR_EINVAL);
  EXPECT_TRUE(iface().mem_free(base).ok());
  EXPECT_EQ(iface().mem_free(base).code(), HMR_EINVAL);
}

TEST_F(SynapseaiIfaceTest, DriverFailuresDuringAllocationLeaveNothingBehind) {
  init();
  hlthunk().set_failure("hlthunk_device_memory_alloc", ENOMEM);
  Result<void*> no_memory = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
  EXPECT_EQ(no_memory.status().code(), HMR_ENOMEM);
  EXPECT_TRUE(has(no_memory.status().reason(), "hlthunk_device_memory_alloc"));
  EXPECT_TRUE(has(no_memory.status().reason(), "ENOMEM"));
  hlthunk().set_failure("hlthunk_device_memory_alloc", 0);

  hlthunk().set_failure("hlthunk_device_memory_map", EFAULT);
  Result<void*> no_map = iface().mem_alloc(DeviceId{0}, page_, MemoryKind::device_only);
  EXPECT_EQ(no_map.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(no_map.status().reason(), "hlthunk_device_memory_map"));
  EXPECT_EQ(hlthunk().live_handles(), 0);  // the handle it did get was freed again
}

// Memory the driver kept mapped is still hmr's: reported, kept, and freed by a later call.
TEST_F(SynapseaiIfaceTest, FailedUnmapIsReportedAndTheMemoryKept) {
  init();
  void* base = alloc(page_);
  hlthunk().set_failure("hlthunk_memory_unmap", EBUSY);
  Status status = iface().mem_free(base);
  EXPECT_EQ(status.code(), HMR_EBUSY);
  EXPECT_TRUE(has(status.reason(), "hlthunk_memory_unmap")) << status.reason();
  EXPECT_EQ(hlthunk().call_count("hlthunk_device_memory_free"), 0);  // never free mapped memory
  EXPECT_TRUE(iface().query(base, 1).ok());                          // hmr still owns it
  hlthunk().set_failure("hlthunk_memory_unmap", 0);
  EXPECT_TRUE(iface().mem_free(base).ok());
  EXPECT_EQ(hlthunk().live_handles(), 0);
}

// The driver finds a mapping only by its exact start and takes the range as an offset into it
// (habanalabs memory.c export_dmabuf_from_addr): an interior address is refused.
TEST_F(SynapseaiIfaceTest, OwnMemoryExportNamesTheMappingStartAndTheRangeByOffset) {
  init();
  void* base = alloc(16 * page_);
  const size_t start = 3 * page_ + 100;
  Result<DmabufExport> exported = iface().export_dmabuf({at(base, start), 2 * page_});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, 100u);  // inside the dma-buf, which starts at the range's page
  EXPECT_EQ(exported->len, 2 * page_);
  EXPECT_EQ(exported->exported_len, 3 * page_);
  EXPECT_EQ(fd_size(exported->fd.get()), 3 * page_);

  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t offset = 1;
  uint32_t flags = 0;
  hlthunk().last_export(&address, &size, &offset, &flags);
  EXPECT_EQ(address, reinterpret_cast<uintptr_t>(base));
  EXPECT_EQ(size, 3 * page_);
  EXPECT_EQ(offset, 3 * page_);
  EXPECT_EQ(flags, static_cast<uint32_t>(O_RDWR | O_CLOEXEC));
  EXPECT_EQ(fake_synapse().call_count("hcclLookupDMABuff"), 0);
}

// The driver refuses to unmap memory while a dma-buf of it is alive (memory.c unmap_device_va):
// hmr keeps such memory, says why, and frees it once the export is gone.
TEST_F(SynapseaiIfaceTest, FreeingExportedMemoryIsRefusedAndTheMemoryKept) {
  init();
  void* base = alloc(4 * page_);
  Result<PointerInfo> before = iface().query(base, 64);
  ASSERT_TRUE(before.ok());
  std::optional<DmabufExport> exported;
  {
    Result<DmabufExport> made = iface().export_dmabuf({base, page_});
    ASSERT_TRUE(made.ok()) << made.status().reason();
    exported = std::move(*made);
  }
  Status refused = iface().mem_free(base);
  EXPECT_EQ(refused.code(), HMR_EBUSY);
  EXPECT_TRUE(has(refused.reason(), "dma-buf")) << refused.reason();
  Result<PointerInfo> kept = iface().query(base, 64);
  ASSERT_TRUE(kept.ok()) << kept.status().reason();
  EXPECT_EQ(kept->alloc_id, before->alloc_id);  // the same memory, not a new identity
  EXPECT_EQ(hlthunk().live_handles(), 1);

  exported.reset();  // the dma-buf is released
  EXPECT_TRUE(iface().mem_free(base).ok());
  EXPECT_EQ(hlthunk().live_handles(), 0);
  EXPECT_EQ(hlthunk().live_mappings(), 0);
}

TEST_F(SynapseaiIfaceTest, OwnMemoryWithoutTheMappedExportIsUnsupportedWithAReason) {
  use_hlthunk(fake_hlthunk_noexport_path());
  init();
  void* base = alloc(page_);
  Result<DmabufExport> exported = iface().export_dmabuf({base, page_});
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(exported.status().reason(), "hlthunk_device_mapped_memory_export_dmabuf_fd"));
  // Nor can memory the application allocated be exported (that takes the same hl-thunk call),
  // and HCCL is not asked unless the application says its HCCL is set up: the reason says so.
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_FALSE(caps->dmabuf.supported);
  EXPECT_TRUE(has(caps->dmabuf.reason, kHcclDmabufVariable)) << caps->dmabuf.reason;
  EXPECT_TRUE(has(caps->dmabuf.reason, "hlthunk_device_mapped_memory_export_dmabuf_fd"))
      << caps->dmabuf.reason;
}

TEST_F(SynapseaiIfaceTest, ExportFailuresAreMappedAndLeakNothing) {
  init();
  void* base = alloc(4 * page_);
  const int fds = open_fd_count();
  hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", ENOTTY);  // Gaudi1
  Result<DmabufExport> old_device = iface().export_dmabuf({base, page_});
  EXPECT_EQ(old_device.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(old_device.status().reason(), "ENOTTY")) << old_device.status().reason();
  hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", ENOMEM);
  EXPECT_EQ(iface().export_dmabuf({base, page_}).status().code(), HMR_ENOMEM);
  EXPECT_EQ(open_fd_count(), fds);
}

// HCCL's hcclLookupDMABuff ignores address and size and returns the one gaudi-direct dma-buf
// it keeps, of the whole HBM pool from the pool's start (HCL hccl_context.cpp,
// scaleout_provider.cpp).
TEST_F(SynapseaiIfaceTest, DeclaredMemoryExportsThroughHcclsOneDmabufFromThePoolStart) {
  only_hccl_exports();
  init();
  ASSERT_EQ(fake_synapse().acquire(0), 0);
  const uint64_t pool = fake_synapse().pool_start(0);
  const uint64_t app = app_alloc(0, 8 * page_);
  app_alloc(0, page_);
  const uint64_t later = app_alloc(0, 4 * page_);  // not at the pool's start
  ASSERT_GT(later, pool);
  const size_t start = 2 * page_ + 40;
  for (uint64_t memory : {app, later}) {
    Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory + start), page_});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    EXPECT_EQ(exported->offset, memory + start - pool);  // from the pool's start
    EXPECT_EQ(exported->len, page_);
    EXPECT_EQ(exported->exported_len, fd_size(exported->fd.get()));
    // hmr's own descriptor: HCCL's is neither handed out nor closed.
    EXPECT_NE(exported->fd.get(), fake_synapse().hccl_fd());
  }
  const int hccl_fd = fake_synapse().hccl_fd();
  ASSERT_GE(hccl_fd, 0);
  EXPECT_EQ(fcntl(hccl_fd, F_GETFD), FD_CLOEXEC);  // still open: HCCL still uses it
  EXPECT_EQ(hlthunk().call_count("hlthunk_open"), 0);  // the application's device stays its own
  EXPECT_EQ(hlthunk().call_count("hlthunk_open_by_module_id"), 0);

  // HCCL answers for any address, so hmr bounds the range by the pool itself.
  const int fds = open_fd_count();
  std::vector<char> host(2 * page_);
  Result<DmabufExport> outside = iface().export_dmabuf({host.data(), 64});
  EXPECT_EQ(outside.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(outside.status().reason(), "HBM pool")) << outside.status().reason();
  const uint64_t other_device = app_alloc(1, page_);  // not the device this process acquired
  EXPECT_EQ(iface().export_dmabuf({as_pointer(other_device), 64}).status().code(), HMR_EINVAL);
  EXPECT_EQ(open_fd_count(), fds);
}

TEST_F(SynapseaiIfaceTest, DeclaredMemoryNeedsAnAcquiredDeviceAndHccl) {
  only_hccl_exports();
  init();
  const uint64_t app = app_alloc(0, page_);
  Result<DmabufExport> refused = iface().export_dmabuf({as_pointer(app), 64});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(has(refused.status().reason(), "synDeviceGetInfoV2")) << refused.status().reason();

  ASSERT_EQ(fake_synapse().acquire(0), 0);
  fake_synapse().set_failure("hcclLookupDMABuff", -1);  // no communicator, or no gaudi-direct
  Result<DmabufExport> no_hccl = iface().export_dmabuf({as_pointer(app), 64});
  EXPECT_EQ(no_hccl.status().code(), HMR_EIO);
  EXPECT_TRUE(has(no_hccl.status().reason(), "hcclLookupDMABuff")) << no_hccl.status().reason();
}

// Memory the application allocated is exported by hl-thunk from the device mapping that holds
// the acquired device's "global_hbm" pool (libfabric's fabtests and UCX's Gaudi transport do
// the same): the mapping is named by its start, which SCAL gives as the pool's
// device_base_allocated_address, not the pool's own start; the range by its pages' offset.
// HCCL is never asked: before it has a communicator its lookup crashes the process (the fake
// aborts there, as the real one dies), and hmr cannot tell whether it has one.
TEST_F(SynapseaiIfaceTest, DeclaredMemoryExportsFromThePoolsMappingThroughHlthunk) {
  init();
  const HeldDevice held = acquire_as_synapse();
  const uint64_t first = app_alloc(0, 8 * page_);
  app_alloc(0, page_);
  const uint64_t later = app_alloc(0, 4 * page_);
  ASSERT_EQ(first, held.pool_base);
  ASSERT_GT(later, first);
  const size_t start = 2 * page_ + 40;
  for (uint64_t memory : {first, later}) {
    Result<DmabufExport> exported = iface().export_dmabuf({as_pointer(memory + start), page_});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    EXPECT_EQ(exported->offset, 40u);  // inside the dma-buf, which starts at the range's page
    EXPECT_EQ(exported->len, page_);
    EXPECT_EQ(exported->exported_len, 2 * page_);
    EXPECT_EQ(fd_size(exported->fd.get()), 2 * page_);
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t offset = 0;
    uint32_t flags = 0;
    hlthunk().last_export(&address, &size, &offset, &flags);
    EXPECT_EQ(address, held.mapping_start);
    EXPECT_EQ(size, 2 * page_);
    EXPECT_EQ(offset, memory + 2 * page_ - held.mapping_start);
    EXPECT_EQ(flags, static_cast<uint32_t>(O_RDWR | O_CLOEXEC));
  }
  EXPECT_EQ(fake_synapse().call_count("hcclLookupDMABuff"), 0);
  EXPECT_EQ(hlthunk().call_count("hlthunk_open"), 1);  // the application's: hmr opened none
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{0});
  ASSERT_TRUE(caps.ok());
  EXPECT_TRUE(caps->dmabuf.supported) << caps->dmabuf.reason;

  // Only the pool's memory: host memory and another device's are refused, and nothing leaks.
  const int fds = open_fd_count();
  std::vector<char> host(2 * page_);
  Result<DmabufExport> outside = iface().export_dmabuf({host.data(), 64});
  EXPECT_EQ(outside.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(outside.status().reason(), "global_hbm")) << outside.status().reason();
  const uint64_t other_device = app_alloc(1, page_);
  EXPECT_EQ(iface().export_dmabuf({as_pointer(other_device), 64}).status().code(), HMR_EINVAL);
  // The pool's last byte exports; one byte past it does not.
  EXPECT_TRUE(iface().export_dmabuf({as_pointer(held.pool_base + held.pool_size - 1), 1}).ok());
  EXPECT_EQ(iface().export_dmabuf({as_pointer(held.pool_base + held.pool_size - 1), 2})
                .status()
                .code(),
            HMR_EINVAL);
  EXPECT_EQ(open_fd_count(), fds);
}

// Each call the export makes can fail: each says which, with a code, and leaves no fd behind.
TEST_F(SynapseaiIfaceTest, PoolExportFailuresSayWhichCallAndLeakNothing) {
  init();
  const int fds = open_fd_count();
  Result<DmabufExport> not_acquired = iface().export_dmabuf({as_pointer(0x7f0000000000), 64});
  EXPECT_FALSE(not_acquired.ok());
  EXPECT_TRUE(has(not_acquired.status().reason(), "synDeviceGetInfoV2"))
      << not_acquired.status().reason();

  const HeldDevice held = acquire_as_synapse();
  const uint64_t app = app_alloc(0, page_);
  ASSERT_EQ(app, held.pool_base);
  struct Injected {
    const char* call;
    int code;
    int expected;
    const char* reason;
  };
  for (const Injected& injected :
       {Injected{"scal_get_handle_from_fd", 1, HMR_EIO, "scal_get_handle_from_fd"},
        Injected{"scal_get_pool_handle_by_name", 3, HMR_EIO, "global_hbm"},
        Injected{"scal_pool_get_infoV2", 2, HMR_EIO, "scal_pool_get_infoV2"}}) {
    SCOPED_TRACE(injected.call);
    fake_scal().set_failure(injected.call, injected.code);
    Result<DmabufExport> failed = iface().export_dmabuf({as_pointer(app), 64});
    EXPECT_EQ(failed.status().code(), injected.expected);
    EXPECT_TRUE(has(failed.status().reason(), injected.reason)) << failed.status().reason();
    fake_scal().set_failure(injected.call, 0);
  }
  for (const auto& [error, expected] : {std::pair{ENOMEM, HMR_ENOMEM}, std::pair{ENOTTY,
                                                                                HMR_EOPNOTSUPP}}) {
    hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", error);
    Result<DmabufExport> failed = iface().export_dmabuf({as_pointer(app), 64});
    EXPECT_EQ(failed.status().code(), expected);
    EXPECT_TRUE(has(failed.status().reason(), "global_hbm")) << failed.status().reason();
  }
  hlthunk().set_failure("hlthunk_device_mapped_memory_export_dmabuf_fd", 0);
  EXPECT_TRUE(iface().export_dmabuf({as_pointer(app), 64}).ok());

  // A device SynapseAI holds without SCAL on its fd (here: none at all) is refused likewise.
  ASSERT_EQ(fake_synapse().acquire(0), 0);
  Result<DmabufExport> no_scal = iface().export_dmabuf({as_pointer(app), 64});
  EXPECT_EQ(no_scal.status().code(), HMR_EIO);
  EXPECT_TRUE(has(no_scal.status().reason(), "SCAL")) << no_scal.status().reason();
  EXPECT_EQ(fake_synapse().call_count("hcclLookupDMABuff"), 0);
  EXPECT_EQ(open_fd_count(), fds + 1);  // the application's device fd, and nothing of hmr's
}

// Without SCAL (or the mapped export) memory the application allocated cannot be placed in a
// mapping, and HCCL's lookup is not tried unless the application says its HCCL is set up: the
// refusal says what is missing and how to allow HCCL's dma-buf.
TEST_F(SynapseaiIfaceTest, WithoutScalHcclIsAskedOnlyWhereTheApplicationAllowsIt) {
  setenv("HMR_SCAL_LIBRARY", "/nonexistent/hmr/libscal.so", 1);
  init();
  EXPECT_TRUE(iface().scal_path().empty());
  ASSERT_EQ(fake_synapse().acquire(0), 0);
  const uint64_t app = app_alloc(0, page_);
  Result<DmabufExport> refused = iface().export_dmabuf({as_pointer(app), 64});
  EXPECT_EQ(refused.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(refused.status().reason(), "/nonexistent/hmr/libscal.so"))
      << refused.status().reason();
  EXPECT_TRUE(has(refused.status().reason(), kHcclDmabufVariable)) << refused.status().reason();
  EXPECT_EQ(fake_synapse().call_count("hcclLookupDMABuff"), 0);
  Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{1});
  ASSERT_TRUE(caps.ok());
  EXPECT_FALSE(caps->dmabuf.supported);
  EXPECT_TRUE(has(caps->dmabuf.reason, kHcclDmabufVariable)) << caps->dmabuf.reason;
}

TEST_F(SynapseaiIfaceTest, AnUnreadableHcclConsentLeavesTheIfaceUnavailableAndSaysWhy) {
  setenv(kHcclDmabufVariable, "perhaps", 1);
  Status status = iface().init();
  EXPECT_EQ(status.code(), HMR_EINVAL);
  EXPECT_TRUE(has(status.reason(), kHcclDmabufVariable)) << status.reason();
}

TEST_F(SynapseaiIfaceTest, ExportsLeakNoFd) {
  init();
  void* base = alloc(4 * page_);
  expect_exports_leak_no_fd(iface(), base, page_);
}

TEST_F(SynapseaiIfaceTest, CopiesAndHostRegistrationAreUnsupportedWithReasons) {
  init();
  void* base = alloc(page_);
  std::vector<char> host(page_);
  Status to = iface().copy_to_device(base, host.data(), 16);
  EXPECT_EQ(to.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(to.reason(), "synMemCopyAsync")) << to.reason();
  Status from = iface().copy_from_device(host.data(), base, 16);
  EXPECT_EQ(from.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(from.reason(), "synMemCopyAsync"));
  Status pin = iface().host_register(host.data(), host.size());
  EXPECT_EQ(pin.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(pin.reason(), "synHostMap")) << pin.reason();
  EXPECT_EQ(iface().host_unregister(host.data()).code(), HMR_EOPNOTSUPP);
}

TEST_F(SynapseaiIfaceTest, CapabilitiesArePerDeviceAndEveryNoSaysWhy) {
  init();
  for (uint64_t device : {0u, 1u}) {
    Result<hmem::DeviceCapabilities> caps = iface().capabilities(DeviceId{device});
    ASSERT_TRUE(caps.ok());
    EXPECT_EQ(caps->device, DeviceId{device});
    EXPECT_TRUE(caps->dmabuf.supported);
    EXPECT_TRUE(caps->dmabuf.reason.empty());
    EXPECT_FALSE(caps->peer_direct.supported);
    EXPECT_TRUE(has(caps->peer_direct.reason, "device " + std::to_string(device)));
    EXPECT_FALSE(caps->ipc.supported);
    EXPECT_FALSE(caps->ipc.reason.empty());
  }
  EXPECT_EQ(iface().capabilities(DeviceId{2}).status().code(), HMR_EINVAL);
}

TEST_F(SynapseaiIfaceTest, DestructionFreesMemoryThenClosesTheDevice) {
  init();
  ASSERT_NE(alloc(page_), nullptr);
  ASSERT_NE(alloc(2 * page_), nullptr);
  EXPECT_EQ(hlthunk().open_devices(), 1);
  iface_.reset();
  EXPECT_EQ(hlthunk().call_count("hlthunk_memory_unmap"), 2);
  EXPECT_EQ(hlthunk().call_count("hlthunk_device_memory_free"), 2);
  // Freed before the close: the fake releases leftovers on close, so count the calls, too.
  EXPECT_EQ(hlthunk().call_count("hlthunk_close"), 1);
  EXPECT_EQ(hlthunk().live_handles(), 0);
  EXPECT_EQ(hlthunk().open_devices(), 0);
}

}  // namespace
}  // namespace hmr::synapseai
