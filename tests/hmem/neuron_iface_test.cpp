// The Neuron iface against the fake runtime (tests/fakes/fake_nrt.c), loaded the way a user
// points hmr at a runtime: HMR_NEURON_LIBRARY.
#include "neuron/neuron_iface.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "hmem/dmabuf_share.h"
#include "hmem/hmem_registry.h"
#include "hmem/iface_list.h"
#include "tests/hmem/export_checks.h"
#include "tests/hmem/neuron_fake_library.h"

namespace hmr::neuron {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::fake_nrt;
using hmr::testing::fake_nrt_path;
using hmr::testing::fake_nrt_v1_path;
using hmr::testing::fd_size;
using hmr::testing::expect_exports_leak_no_fd;
using hmr::testing::open_fd_count;

constexpr size_t kPage = kNeuronGranule;

char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

// A recognisable byte for every offset, so a misplaced offset shows.
std::vector<unsigned char> pattern(size_t len, unsigned seed) {
  std::vector<unsigned char> bytes(len);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  return bytes;
}

std::vector<unsigned char> read_fd(int fd, uint64_t offset, size_t len) {
  std::vector<unsigned char> bytes(len);
  EXPECT_EQ(pread(fd, bytes.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  return bytes;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class NeuronIfaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    use(fake_nrt_path());
    fake_nrt(fake_nrt_path()).reset();
    fake_nrt(fake_nrt_v1_path()).reset();
    // The application owns the runtime: it calls nrt_init (claiming its NeuronCores) before it
    // allocates the memory it registers; hmr never does (see InitNeverClaimsNeuronCores).
    for (const char* path : {fake_nrt_path(), fake_nrt_v1_path()}) {
      ASSERT_EQ(fake_nrt(path).application_init(1 /* NO_FW */, "", ""), 0);
    }
  }
  void TearDown() override { unsetenv("HMR_NEURON_LIBRARY"); }

  void use(const char* path) {
    path_ = path;
    setenv("HMR_NEURON_LIBRARY", path, 1);
  }
  const testing::FakeNrt& fake() const { return fake_nrt(path_); }

  void init() { ASSERT_TRUE(iface_.init().ok()); }

  void* alloc(int vnc, size_t len) {
    Result<void*> ptr = iface_.mem_alloc(DeviceId{static_cast<uint64_t>(vnc)}, len,
                                         MemoryKind::device_only);
    EXPECT_TRUE(ptr.ok()) << ptr.status().reason();
    return ptr.ok() ? *ptr : nullptr;
  }

  const char* path_ = nullptr;
  NeuronIface iface_;
};

TEST_F(NeuronIfaceTest, InitLoadsTheOverrideAndCountsVisibleCores) {
  init();
  EXPECT_EQ(iface_.iface(), HMR_HMEM_NEURON);
  EXPECT_EQ(iface_.library_path(), fake_nrt_path());
  EXPECT_EQ(iface_.runtime_version(), "2.21.7");
  Result<int> count = iface_.device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_NRT_VNC_COUNT);
  EXPECT_EQ(iface_.free_tracking(), hmem::Iface::FreeTracking::explicit_only);
  EXPECT_TRUE(iface_.init().ok());  // a second init is a no-op
}

// nrt_init claims the visible NeuronCores for the calling process, exclusively: an iface that
// called it in every process where libnrt is installed would take the cores from the
// application's workers.  libfabric never calls it; nrt_get_visible_vnc_count works before it.
TEST_F(NeuronIfaceTest, InitNeverClaimsNeuronCores) {
  fake().reset();  // a process whose application has not initialised the runtime (yet)
  const int before = fake().call_count("nrt_init");
  init();
  EXPECT_EQ(fake().call_count("nrt_init"), before) << "hmr claimed the NeuronCores";
  Result<int> count = iface_.device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_NRT_VNC_COUNT);
}

TEST_F(NeuronIfaceTest, MissingLibraryMeansIfaceUnavailable) {
  use("/nonexistent/hmr/libnrt.so.1");
  Status status = iface_.init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOSYS);
  EXPECT_TRUE(has(status.reason(), "neuron iface unavailable")) << status.reason();
  EXPECT_TRUE(has(status.reason(), "/nonexistent/hmr/libnrt.so.1"));
  EXPECT_TRUE(has(status.reason(), "HMR_NEURON_LIBRARY"));
  EXPECT_TRUE(iface_.library_path().empty());

  // Unusable, but never a crash and never "not Neuron memory".
  int local = 0;
  EXPECT_EQ(iface_.query(&local, sizeof local).status().code(), HMR_EINVAL);
  EXPECT_FALSE(iface_.export_dmabuf({&local, sizeof local}).ok());
  EXPECT_FALSE(iface_.capabilities(DeviceId{0}).ok());
  EXPECT_FALSE(iface_.device_count().ok());
  EXPECT_FALSE(iface_.mem_alloc(DeviceId{0}, kPage, MemoryKind::device_only).ok());
  EXPECT_FALSE(iface_.copy_to_device(&local, &local, sizeof local).ok());
}

TEST_F(NeuronIfaceTest, InitErrorsFailClosedWithTheRuntimeText) {
  fake().set_failure("nrt_get_visible_vnc_count", NRT_RESOURCE);
  Status status = iface_.init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_ENOMEM);
  EXPECT_TRUE(has(status.reason(), "nrt_get_visible_vnc_count")) << status.reason();
  EXPECT_TRUE(has(status.reason(), "NRT_RESOURCE"));
  EXPECT_TRUE(has(status.reason(), "fake: out of resources"));  // the runtime's own words
  EXPECT_TRUE(has(status.reason(), fake_nrt_path()));
  EXPECT_TRUE(iface_.library_path().empty());

  fake().set_failure("nrt_get_visible_vnc_count", NRT_FAILURE);
  status = iface_.init();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_TRUE(has(status.reason(), "nrt_get_visible_vnc_count")) << status.reason();

  fake().set_failure("nrt_get_visible_vnc_count", 0);
  EXPECT_TRUE(iface_.init().ok());  // a failed init can be retried
}

// The Neuron iface recognises only memory hmr allocated, so a runtime the application loaded
// but hmr could not start takes no recognition away: host memory is still host memory (it was
// refused with HMR_ENOSYS, "cannot tell neuron memory from host memory").
TEST_F(NeuronIfaceTest, AFailedInitOfTheApplicationsRuntimeLeavesHostMemoryHost) {
  fake().set_failure("nrt_get_visible_vnc_count", NRT_FAILURE);
  Result<hmem::IfaceSelection> neuron_only = hmem::parse_iface_list("neuron");
  ASSERT_TRUE(neuron_only.ok());
  hmem::Registry registry(*neuron_only);
  ASSERT_TRUE(registry.load().ok());
  int local = 0;
  Result<PointerInfo> info = registry.classify(&local, sizeof local);
  fake().set_failure("nrt_get_visible_vnc_count", 0);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_SYSTEM);
  const hmem::IfaceReport report = registry.describe().at(HMR_HMEM_NEURON);
  EXPECT_TRUE(report.resident);
  EXPECT_FALSE(report.loaded);
}

TEST_F(NeuronIfaceTest, QueryKnowsAllocationsOfEachCore) {
  init();
  void* on1 = alloc(1, 10000);
  void* on0 = alloc(0, kPage);
  ASSERT_NE(on1, nullptr);
  ASSERT_NE(on0, nullptr);

  Result<PointerInfo> info = iface_.query(at(on1, kPage + 7), 100);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->iface, HMR_HMEM_NEURON);
  EXPECT_EQ(info->device, DeviceId{1});
  EXPECT_EQ(info->base, reinterpret_cast<uintptr_t>(on1));
  EXPECT_EQ(info->alloc_len, 3 * kPage);  // 10000 bytes rounded up to 4 KiB units
  EXPECT_EQ(info->kind, MemoryKind::device_only);
  EXPECT_NE(info->alloc_id, 0u);

  Result<PointerInfo> other = iface_.query(on0, kPage);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->device, DeviceId{0});
  EXPECT_NE(other->base, info->base);
  EXPECT_NE(other->alloc_id, info->alloc_id);
  // The last byte belongs to the allocation; the range may run up to its end and no further.
  EXPECT_TRUE(iface_.query(at(on1, 3 * kPage - 1), 1).ok());
  EXPECT_EQ(fake().live_tensors(), 2);
}

TEST_F(NeuronIfaceTest, MemoryHmrDidNotAllocateIsNotNeuronMemoryToQuery) {
  init();
  std::vector<char> host(4096);
  Result<PointerInfo> info = iface_.query(host.data(), host.size());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), HMR_ENOENT);
  EXPECT_TRUE(has(info.status().reason(), "declare")) << info.status().reason();

  // Neuron memory the application allocated itself is invisible too: nrt cannot be asked.
  void* tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 0, 4 * kPage, &tensor);
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(iface_.query(app, kPage).status().code(), HMR_ENOENT);
  testing::app_tensor_free(fake(), tensor);
}

TEST_F(NeuronIfaceTest, BadRangesAreRejected) {
  init();
  void* base = alloc(0, 2 * kPage);
  EXPECT_EQ(iface_.query(base, 0).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_.query(at(base, kPage), 2 * kPage).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_.query(reinterpret_cast<void*>(UINTPTR_MAX - 8), 64).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_.export_dmabuf({base, 0}).status().code(), HMR_EINVAL);
  Result<DmabufExport> past = iface_.export_dmabuf({at(base, kPage), 2 * kPage});
  EXPECT_EQ(past.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(past.status().reason(), "not inside one Neuron allocation"));
}

TEST_F(NeuronIfaceTest, FreeThenReallocationAtTheSameAddressGetsANewIdentity) {
  init();
  void* first = alloc(0, 4 * kPage);
  Result<PointerInfo> before = iface_.query(first, 64);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(iface_.mem_free(first).ok());
  EXPECT_EQ(fake().live_tensors(), 0);
  EXPECT_EQ(iface_.query(first, 64).status().code(), HMR_ENOENT);

  void* second = alloc(0, 4 * kPage);
  ASSERT_EQ(second, first);  // the fake reuses the lowest free address, as runtimes often do
  Result<PointerInfo> after = iface_.query(second, 64);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->alloc_id, before->alloc_id);
}

TEST_F(NeuronIfaceTest, MemAllocAndFreeRejectBadArguments) {
  init();
  EXPECT_EQ(iface_.mem_alloc(DeviceId{0}, 0, MemoryKind::device_only).status().code(), HMR_EINVAL);
  EXPECT_EQ(iface_.mem_alloc(DeviceId{0}, SIZE_MAX, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  Result<void*> no_core = iface_.mem_alloc(DeviceId{2}, kPage, MemoryKind::device_only);
  EXPECT_EQ(no_core.status().code(), HMR_EINVAL);
  EXPECT_TRUE(has(no_core.status().reason(), "vnc 2"));
  for (MemoryKind kind : {MemoryKind::host_alloc, MemoryKind::managed, MemoryKind::host}) {
    Result<void*> wrong = iface_.mem_alloc(DeviceId{0}, kPage, kind);
    EXPECT_EQ(wrong.status().code(), HMR_EOPNOTSUPP);
    EXPECT_TRUE(has(wrong.status().reason(), hmem::memory_kind_name(kind)));
  }
  EXPECT_EQ(fake().call_count("nrt_tensor_allocate"), 0);

  void* base = alloc(0, 2 * kPage);
  int local = 0;
  EXPECT_EQ(iface_.mem_free(&local).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.mem_free(nullptr).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.mem_free(at(base, kPage)).code(), HMR_EINVAL);  // not the start
  EXPECT_TRUE(iface_.mem_free(base).ok());
  EXPECT_EQ(iface_.mem_free(base).code(), HMR_EINVAL);  // a second free is refused
  EXPECT_EQ(fake().call_count("nrt_tensor_free"), 1);
}

TEST_F(NeuronIfaceTest, RuntimeFailuresDuringAllocationLeaveNothingBehind) {
  init();
  fake().set_failure("nrt_tensor_allocate", NRT_RESOURCE);
  Result<void*> refused = iface_.mem_alloc(DeviceId{1}, kPage, MemoryKind::device_only);
  EXPECT_EQ(refused.status().code(), HMR_ENOMEM);
  EXPECT_TRUE(has(refused.status().reason(), "nrt_tensor_allocate"));
  fake().set_failure("nrt_tensor_allocate", 0);

  fake().set_failure("nrt_tensor_get_va", NRT_FAILURE);
  Result<void*> no_va = iface_.mem_alloc(DeviceId{1}, kPage, MemoryKind::device_only);
  EXPECT_EQ(no_va.status().code(), HMR_EIO);
  EXPECT_EQ(fake().live_tensors(), 0);  // the tensor the runtime did give was freed again
}

TEST_F(NeuronIfaceTest, CopiesRoundTripThroughTheTensor) {
  init();
  void* base = alloc(1, 8 * kPage);
  const std::vector<unsigned char> sent = pattern(3 * kPage + 11, 7);
  ASSERT_TRUE(iface_.copy_to_device(at(base, 1000), sent.data(), sent.size()).ok());
  std::vector<unsigned char> back(sent.size());
  ASSERT_TRUE(iface_.copy_from_device(back.data(), at(base, 1000), back.size()).ok());
  EXPECT_EQ(back, sent);
  EXPECT_EQ(fake().call_count("nrt_tensor_write"), 1);
  EXPECT_EQ(fake().call_count("nrt_tensor_read"), 1);

  // Past the tensor, empty, or null: refused before the runtime sees it.
  EXPECT_EQ(iface_.copy_to_device(at(base, 7 * kPage), sent.data(), 2 * kPage).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_from_device(back.data(), base, 0).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_to_device(base, nullptr, 16).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_from_device(nullptr, base, 16).code(), HMR_EINVAL);

  fake().set_failure("nrt_tensor_read", NRT_TIMEOUT);
  Status failed = iface_.copy_from_device(back.data(), base, 16);
  EXPECT_EQ(failed.code(), HMR_ETIMEDOUT);
  EXPECT_TRUE(has(failed.reason(), "nrt_tensor_read"));
}

TEST_F(NeuronIfaceTest, CopiesToMemoryHmrDidNotAllocateUseTheRuntimeMemcpy) {
  init();
  void* tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 0, 2 * kPage, &tensor);
  ASSERT_NE(app, nullptr);
  const std::vector<unsigned char> sent = pattern(100, 3);
  ASSERT_TRUE(iface_.copy_to_device(app, sent.data(), sent.size()).ok());
  EXPECT_EQ(fake().call_count("nrt_memcpy_to_device"), 1);

  // No device-to-host copy exists without the tensor: unsupported, and it says why.
  std::vector<unsigned char> back(sent.size());
  Status status = iface_.copy_from_device(back.data(), app, back.size());
  EXPECT_EQ(status.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(status.reason(), "nrt_tensor_read")) << status.reason();
  testing::app_tensor_free(fake(), tensor);
}

TEST_F(NeuronIfaceTest, HostRegistrationIsUnsupportedWithAReason) {
  init();
  std::vector<char> host(4096);
  Status status = iface_.host_register(host.data(), host.size());
  EXPECT_EQ(status.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(status.reason(), "nrt")) << status.reason();
  EXPECT_EQ(iface_.host_unregister(host.data()).code(), HMR_EOPNOTSUPP);
}

TEST_F(NeuronIfaceTest, V2ExportSaysWhereTheRangeLiesInTheTensor) {
  init();
  void* base = alloc(0, 16 * kPage);
  const std::vector<unsigned char> bytes = pattern(16 * kPage, 1);
  ASSERT_TRUE(iface_.copy_to_device(base, bytes.data(), bytes.size()).ok());

  const size_t start = 3 * kPage + 100;  // not page aligned
  Result<DmabufExport> exported = iface_.export_dmabuf({at(base, start), 2 * kPage});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_TRUE(exported->fd.valid());
  EXPECT_EQ(exported->offset, start);  // the runtime's fd covers the whole tensor
  EXPECT_EQ(exported->len, 2 * kPage);
  EXPECT_EQ(exported->exported_len, 16 * kPage);
  EXPECT_EQ(fd_size(exported->fd.get()), exported->exported_len);

  uint64_t va = 0;
  uint64_t size = 0;
  fake().last_export(&va, &size);
  EXPECT_EQ(va, reinterpret_cast<uintptr_t>(base) + 3 * kPage);  // whole 4 KiB pages asked for
  EXPECT_EQ(size, 3 * kPage);
  EXPECT_EQ(fake().call_count("nrt_get_dmabuf_fd_v2"), 1);
  EXPECT_EQ(fake().call_count("nrt_get_dmabuf_fd"), 0);

  // The bytes at (fd, offset) are the bytes at the requested address.
  const std::vector<unsigned char> seen = read_fd(exported->fd.get(), exported->offset, 64);
  EXPECT_TRUE(std::equal(seen.begin(), seen.end(), bytes.begin() + start));
}

TEST_F(NeuronIfaceTest, V1ExportStartsAtTheTensorHmrAllocated) {
  use(fake_nrt_v1_path());
  init();
  void* base = alloc(0, 16 * kPage);
  const std::vector<unsigned char> bytes = pattern(16 * kPage, 2);
  ASSERT_TRUE(iface_.copy_to_device(base, bytes.data(), bytes.size()).ok());

  const size_t start = 3 * kPage + 100;
  Result<DmabufExport> exported = iface_.export_dmabuf({at(base, start), 2 * kPage});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  // v1 exports only from the start of the object: the fd starts at the tensor.
  EXPECT_EQ(exported->offset, start);
  EXPECT_EQ(exported->len, 2 * kPage);
  EXPECT_EQ(exported->exported_len, 6 * kPage);  // up to the page that holds the last byte
  uint64_t va = 0;
  uint64_t size = 0;
  fake().last_export(&va, &size);
  EXPECT_EQ(va, reinterpret_cast<uintptr_t>(base));
  EXPECT_EQ(size, 6 * kPage);
  EXPECT_EQ(fake().call_count("nrt_get_dmabuf_fd"), 1);

  const std::vector<unsigned char> seen = read_fd(exported->fd.get(), exported->offset, 64);
  EXPECT_TRUE(std::equal(seen.begin(), seen.end(), bytes.begin() + start));
}

TEST_F(NeuronIfaceTest, DeclaredMemoryExportsThroughTheRuntime) {
  init();
  void* tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 1, 8 * kPage, &tensor);
  ASSERT_NE(app, nullptr);
  // v2 takes any VA inside the runtime's object, so a range in the middle works.
  Result<DmabufExport> exported = iface_.export_dmabuf({at(app, 2 * kPage + 5), kPage});
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(exported->offset, 2 * kPage + 5);
  EXPECT_EQ(exported->exported_len, 8 * kPage);

  // Not Neuron memory at all: the runtime refuses, read as "dma-buf unsupported".
  std::vector<char> host(2 * kPage);
  Result<DmabufExport> refused = iface_.export_dmabuf({host.data(), 64});
  EXPECT_EQ(refused.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(refused.status().reason(), "nrt_get_dmabuf_fd_v2"));
  testing::app_tensor_free(fake(), tensor);
}

TEST_F(NeuronIfaceTest, V1ExportOfDeclaredMemoryNeedsTheAllocationStart) {
  use(fake_nrt_v1_path());
  init();
  void* tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 0, 8 * kPage, &tensor);
  ASSERT_NE(app, nullptr);

  Result<DmabufExport> from_start = iface_.export_dmabuf({app, 2 * kPage});
  ASSERT_TRUE(from_start.ok()) << from_start.status().reason();
  EXPECT_EQ(from_start->offset, 0u);
  EXPECT_EQ(from_start->exported_len, 2 * kPage);

  const int fds = open_fd_count();
  Result<DmabufExport> inside = iface_.export_dmabuf({at(app, 2 * kPage), kPage});
  ASSERT_FALSE(inside.ok());
  EXPECT_EQ(inside.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(has(inside.status().reason(), "nrt_get_dmabuf_fd_v2")) << inside.status().reason();
  EXPECT_TRUE(has(inside.status().reason(), "start"));
  EXPECT_EQ(open_fd_count(), fds);
  testing::app_tensor_free(fake(), tensor);
}

// Declared memory (a tensor the application allocated) has no allocation id, and its
// "allocation" is the range declared.  A longer range from the same start got the shorter
// range's shared export, and the NIC was handed [offset, offset + len) past the end of the
// dma-buf (a real NIC refuses it; a mapping of it faults).  The export share is keyed by the
// length too.
TEST_F(NeuronIfaceTest, ALongerDeclaredRangeGetsAnExportThatCoversIt) {
  use(fake_nrt_v1_path());
  init();
  void* tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 0, 8 * kPage, &tensor);
  ASSERT_NE(app, nullptr);
  auto declared = [&](size_t len) {
    PointerInfo info;
    info.iface = HMR_HMEM_NEURON;
    info.base = reinterpret_cast<uintptr_t>(app);
    info.alloc_len = len;
    info.kind = MemoryKind::device_only;
    return info;
  };
  auto short_one = core::DmabufShares::instance().acquire(iface_, declared(2 * kPage));
  ASSERT_TRUE(short_one.ok()) << short_one.status().reason();
  auto long_one = core::DmabufShares::instance().acquire(iface_, declared(8 * kPage));
  ASSERT_TRUE(long_one.ok()) << long_one.status().reason();
  EXPECT_EQ((*short_one)->exported_len(), 2 * kPage);
  EXPECT_EQ((*long_one)->exported_len(), 8 * kPage) << "the longer range got the shorter export";
  EXPECT_EQ(fd_size((*long_one)->fd()), 8 * kPage);
  auto again = core::DmabufShares::instance().acquire(iface_, declared(2 * kPage));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), short_one->get()) << "the same declared range is shared";
  short_one->reset();
  long_one->reset();
  again->reset();
  testing::app_tensor_free(fake(), tensor);
}

TEST_F(NeuronIfaceTest, ExportStatusesAreReadAsLibfabricReadsThem) {
  init();
  void* base = alloc(0, 4 * kPage);
  const int fds = open_fd_count();

  fake().set_failure("nrt_get_dmabuf_fd_v2", NRT_RESOURCE);  // a hard error
  Result<DmabufExport> hard = iface_.export_dmabuf({base, kPage});
  EXPECT_EQ(hard.status().code(), HMR_ENOMEM);
  EXPECT_TRUE(has(hard.status().reason(), "NRT_RESOURCE")) << hard.status().reason();

  for (int status : {NRT_INVALID, NRT_FAILURE, NRT_UNINITIALIZED}) {  // "unsupported, fall back"
    fake().set_failure("nrt_get_dmabuf_fd_v2", status);
    Result<DmabufExport> soft = iface_.export_dmabuf({base, kPage});
    EXPECT_EQ(soft.status().code(), HMR_EOPNOTSUPP) << status;
    EXPECT_TRUE(has(soft.status().reason(), "dma-buf unsupported")) << soft.status().reason();
  }
  fake().set_failure("nrt_get_dmabuf_fd_v2", 0);

  fake().set_export_gives_no_fd(1);  // "success" without an fd is not believed
  EXPECT_EQ(iface_.export_dmabuf({base, kPage}).status().code(), HMR_EIO);
  EXPECT_EQ(open_fd_count(), fds);
}

TEST_F(NeuronIfaceTest, ExportsLeakNoFd) {
  init();
  void* base = alloc(0, 4 * kPage);
  expect_exports_leak_no_fd(iface_, base, kPage);
}

TEST_F(NeuronIfaceTest, CapabilitiesArePerCoreAndEveryNoSaysWhy) {
  init();
  for (uint64_t vnc : {0u, 1u}) {
    Result<hmem::DeviceCapabilities> caps = iface_.capabilities(DeviceId{vnc});
    ASSERT_TRUE(caps.ok());
    EXPECT_EQ(caps->device, DeviceId{vnc});
    EXPECT_TRUE(caps->dmabuf.supported);
    EXPECT_TRUE(caps->dmabuf.reason.empty());
    EXPECT_FALSE(caps->peer_direct.supported);
    EXPECT_TRUE(has(caps->peer_direct.reason, "vnc " + std::to_string(vnc)));
    EXPECT_FALSE(caps->ipc.supported);
    EXPECT_FALSE(caps->ipc.reason.empty());
  }
  EXPECT_EQ(iface_.capabilities(DeviceId{2}).status().code(), HMR_EINVAL);
}

TEST_F(NeuronIfaceTest, DestructionFreesTensorsNobodyFreed) {
  {
    NeuronIface scoped;
    ASSERT_TRUE(scoped.init().ok());
    ASSERT_TRUE(scoped.mem_alloc(DeviceId{0}, kPage, MemoryKind::device_only).ok());
    ASSERT_TRUE(scoped.mem_alloc(DeviceId{1}, kPage, MemoryKind::device_only).ok());
    EXPECT_EQ(fake().live_tensors(), 2);
  }
  EXPECT_EQ(fake().live_tensors(), 0);
  EXPECT_EQ(fake().call_count("nrt_tensor_free"), 2);
}

}  // namespace
}  // namespace hmr::neuron
