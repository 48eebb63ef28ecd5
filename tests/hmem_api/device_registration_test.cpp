// Registering fake CUDA memory through the public ABI: detection and declaration, the export
// decision per NIC options and environment, host-shadow sync, the shared per-allocation
// dma-buf, and no CPU touch of device memory (the fake's device ranges are PROT_NONE: a touch
// would crash this binary).
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::MrPtr;

constexpr size_t kAlloc = 64 * 1024;
constexpr int kCudaNotSupported = 801;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<uint8_t> pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> bytes(len);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return bytes;
}

TEST(DeviceRegistration, UndeclaredDeviceMemoryIsDetectedAndExportedAsDmabuf) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const int exports = export_calls();
  MrPtr mr = register_ok(domain.get(), at(device.get(), 4096), 100);
  ASSERT_TRUE(mr);
  const hmr_mr_info info = mr_info(mr.get());
  EXPECT_EQ(info.iface, HMR_HMEM_CUDA);
  EXPECT_EQ(info.device, 0u);
  EXPECT_EQ(info.kind, HMR_MEM_DEVICE_ONLY);
  EXPECT_EQ(info.path, HMR_MR_PATH_DMABUF);
  EXPECT_GE(info.dmabuf_fd, 0);
  EXPECT_EQ(info.dmabuf_offset, 4096u);  // the whole allocation is exported once
  EXPECT_EQ(export_calls(), exports + 1);
  unsigned long long ptr = 0;
  size_t size = 0;
  unsigned long long flags = 0;
  fake_cuda().last_export(&ptr, &size, &flags);
  EXPECT_EQ(ptr, device.address());
  EXPECT_EQ(size, kAlloc);
}

TEST(DeviceRegistration, DeclaredIfaceAndDeviceAreVerified) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr declared = register_ok(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0);
  ASSERT_TRUE(declared);
  EXPECT_EQ(mr_info(declared.get()).path, HMR_MR_PATH_DMABUF);

  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 1, 0, &mr),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "on cuda device 0")) << hmr_last_error();
  EXPECT_EQ(mr, nullptr);

  std::vector<uint8_t> host(4096);
  EXPECT_HMR_ERROR(register_attr(domain.get(), host.data(), host.size(), HMR_HMEM_CUDA, 0, 0, &mr),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "does not know it")) << hmr_last_error();
}

TEST(DeviceRegistration, HmemDomainTakesSystemAsADeclarationAndRefusesDeviceMemoryUnderIt) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr, 0, kSharingMode | HMR_MR_HMEM);
  ASSERT_TRUE(domain);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "declared system memory")) << hmr_last_error();
  EXPECT_EQ(mr, nullptr);
  MrPtr declared = register_ok(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0);
  EXPECT_TRUE(declared);
  std::vector<uint8_t> host(4096);
  MrPtr plain = register_ok(domain.get(), host.data(), host.size());
  ASSERT_TRUE(plain);
  EXPECT_EQ(mr_info(plain.get()).iface, HMR_HMEM_SYSTEM);
  EXPECT_EQ(mr_info(plain.get()).path, HMR_MR_PATH_ADDRESS);
}

TEST(DeviceRegistration, DeclaredKindFlagsMustMatchTheMemory) {
  FakeAllocation managed(0, kAlloc, FAKE_CUDA_MEM_MANAGED);
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(domain.get(), managed.get(), 4096, HMR_HMEM_CUDA, 0,
                                 HMR_HMEM_DEVICE_ONLY, &mr),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "HMR_HMEM_DEVICE_ONLY contradicts")) << hmr_last_error();
  EXPECT_HMR_ERROR(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0,
                                 HMR_HMEM_HOST_ALLOC, &mr),
                   HMR_EINVAL);
  ASSERT_EQ(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_CUDA, 0,
                          HMR_HMEM_DEVICE_ONLY, &mr),
            0)
      << hmr_last_error();
  MrPtr owned(mr);
  EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_DMABUF);
}

TEST(DeviceRegistration, MemoryTheCpuReachesIsRegisteredByAddress) {
  FakeAllocation pinned(0, kAlloc, FAKE_CUDA_MEM_HOST);
  FakeAllocation managed(1, kAlloc, FAKE_CUDA_MEM_MANAGED);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr host_alloc = register_ok(domain.get(), pinned.get(), 4096);
  MrPtr migratable = register_ok(domain.get(), managed.get(), 4096);
  ASSERT_TRUE(host_alloc && migratable);
  EXPECT_EQ(mr_info(host_alloc.get()).kind, HMR_MEM_HOST_ALLOC);
  EXPECT_EQ(mr_info(host_alloc.get()).path, HMR_MR_PATH_ADDRESS);
  EXPECT_EQ(mr_info(migratable.get()).kind, HMR_MEM_MANAGED);
  EXPECT_EQ(mr_info(migratable.get()).device, 1u);
  EXPECT_EQ(mr_info(migratable.get()).path, HMR_MR_PATH_ADDRESS);
}

// Pinned host memory from the runtime is reachable from every device; the ordinal CUDA reports
// for it is only the device it was allocated against.  Declared as another device's memory
// (one staging pool serving several GPUs), it is registered, not refused as a contradiction
// (found by a review: it was refused with "on cuda device 0").  Device memory still is.
TEST(DeviceRegistration, PinnedHostMemoryMayBeDeclaredForAnyDevice) {
  FakeAllocation pinned(0, kAlloc, FAKE_CUDA_MEM_HOST);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr other_device = register_ok(domain.get(), pinned.get(), 4096, HMR_HMEM_CUDA, 1);
  ASSERT_TRUE(other_device);
  EXPECT_EQ(mr_info(other_device.get()).kind, HMR_MEM_HOST_ALLOC);
  EXPECT_EQ(mr_info(other_device.get()).path, HMR_MR_PATH_ADDRESS);
}

// NCCL allocates its network buffers with cuMemHostAlloc and regMr's them as NCCL_PTR_HOST.
// A libfabric provider without FI_HMEM (Debian's tcp and shm) must take such memory as the
// host memory it is: on an H200, NCCL's first collective through the net plugin failed with
// "tcp;ofi_rxm cannot register cuda memory" until the ofi NIC did so.
TEST(DeviceRegistration, PinnedRuntimeMemoryIsHostMemoryToAProviderWithoutHmem) {
  FakeAllocation pinned(0, kAlloc, FAKE_CUDA_MEM_HOST);
  FakeAllocation device(0, kAlloc);
  for (const char* options : {"provider=tcp;domain=lo;fabric=127.0.0.1/32", "provider=shm"}) {
    SCOPED_TRACE(options);
    hmr_domain_attr attr = hmr_test::domain_attr(kSharingMode, options);
    attr.nic = "ofi";
    hmr_domain* raw = nullptr;
    const int rc = hmr_domain_open(&attr, &raw);
    if (rc == -HMR_ENOSYS) GTEST_SKIP() << "no libfabric: " << hmr_last_error();
    ASSERT_EQ(rc, 0) << hmr_last_error();
    hmr_test::DomainPtr domain(raw);
    MrPtr detected = register_ok(domain.get(), pinned.get(), 4096);
    MrPtr declared = register_ok(domain.get(), at(pinned.get(), 8192), 4096, HMR_HMEM_CUDA, 0);
    ASSERT_TRUE(detected && declared);
    for (hmr_mr* mr : {detected.get(), declared.get()}) {
      EXPECT_EQ(mr_info(mr).iface, HMR_HMEM_CUDA);  // what the memory is, for the caller
      EXPECT_EQ(mr_info(mr).kind, HMR_MEM_HOST_ALLOC);
      EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_ADDRESS);
    }
    // Device-only memory still has no way to such a NIC (no dma-buf import, no FI_HMEM, no
    // copies allowed), and the error says so.
    hmr_mr* refused = nullptr;
    EXPECT_NE(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &refused),
              0);
    EXPECT_EQ(refused, nullptr);
    EXPECT_TRUE(contains(hmr_last_error(), "no way to register cuda")) << hmr_last_error();
  }
}

TEST(DeviceRegistration, PeerDirectWhenTheDeviceCannotExportAndTheNicRegistersDeviceAddresses) {
  FakeAllocation device(1, kAlloc);  // the fake's device 1 has no dma-buf
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  const int exports = export_calls();
  MrPtr mr = register_ok(domain.get(), device.get(), 8192);
  ASSERT_TRUE(mr);
  const hmr_mr_info info = mr_info(mr.get());
  EXPECT_EQ(info.path, HMR_MR_PATH_PEER_DIRECT);
  EXPECT_EQ(info.device, 1u);
  EXPECT_EQ(info.dmabuf_fd, -1);
  EXPECT_EQ(export_calls(), exports);
}

// Before the NIC reaches device memory itself (dma-buf, peer-direct), the allocation gets
// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, as the GPUDirect RDMA guide sets it before pinning: a
// synchronous copy into it then returns only once its bytes are there (else it may return
// early, and a peer reading after the application's signal reads old bytes).  A host shadow
// needs none (hmr_mr_sync copies).  A driver that refuses it (NOT_SUPPORTED, as for VMM
// memory) does not fail the registration.  Found by a review; never set before.
TEST(DeviceRegistration, MemoryTheNicReachesDirectlyHasSynchronousCopiesMadeSynchronous) {
  {
    FakeAllocation device(0, kAlloc);
    auto domain = open_domain(nullptr);
    ASSERT_TRUE(domain);
    EXPECT_EQ(fake_cuda().sync_memops(device.address()), 0);
    MrPtr mr = register_ok(domain.get(), at(device.get(), 4096), 100);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_DMABUF);
    EXPECT_EQ(fake_cuda().sync_memops(device.address()), 1);
  }
  {
    FakeAllocation device(1, kAlloc);  // no dma-buf on the fake's device 1
    auto domain = open_domain("peer_direct=1");
    ASSERT_TRUE(domain);
    MrPtr mr = register_ok(domain.get(), device.get(), 8192);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_PEER_DIRECT);
    EXPECT_EQ(fake_cuda().sync_memops(device.address()), 1);
  }
  {
    FakeAllocation device(0, kAlloc);
    auto domain = open_domain(nullptr);
    ASSERT_TRUE(domain);
    fake_cuda().set_failure("cuPointerSetAttribute", 801);  // CUDA_ERROR_NOT_SUPPORTED
    MrPtr mr = register_ok(domain.get(), device.get(), 8192);
    fake_cuda().set_failure("cuPointerSetAttribute", 0);
    ASSERT_TRUE(mr) << "a driver that cannot set SYNC_MEMOPS must not fail the registration";
    EXPECT_EQ(fake_cuda().sync_memops(device.address()), 0);
  }
}

TEST(DeviceRegistration, NicWithoutDmabufImportTakesPeerDirect) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain("dmabuf=0;peer_direct=1");
  ASSERT_TRUE(domain);
  MrPtr mr = register_ok(domain.get(), device.get(), 8192);
  ASSERT_TRUE(mr);
  EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_PEER_DIRECT);
}

TEST(DeviceRegistration, UseDmabufZeroRulesOutDmabufForThatVendor) {
  FakeAllocation device(0, kAlloc);
  ScopedEnv no_dmabuf("FI_HMEM_CUDA_USE_DMABUF", "0");
  auto domain = open_domain("peer_direct=1");  // the environment is read per domain
  ASSERT_TRUE(domain);
  const int exports = export_calls();
  MrPtr mr = register_ok(domain.get(), device.get(), 8192);
  ASSERT_TRUE(mr);
  EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_PEER_DIRECT);
  EXPECT_EQ(export_calls(), exports);

  auto without_peer = open_domain(nullptr);
  ASSERT_TRUE(without_peer);
  hmr_mr* failed = nullptr;
  EXPECT_HMR_ERROR(register_attr(without_peer.get(), device.get(), 8192, HMR_HMEM_SYSTEM, 0, 0,
                                 &failed),
                   HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(hmr_last_error(), "FI_HMEM_CUDA_USE_DMABUF=0")) << hmr_last_error();
}

TEST(DeviceRegistration, NoPathIsAnErrorNamingEveryPathAndWhy) {
  FakeAllocation device(1, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr),
                   HMR_EOPNOTSUPP);
  const std::string reason = hmr_last_error();
  EXPECT_EQ(mr, nullptr);
  EXPECT_TRUE(contains(reason, "cuda device 1")) << reason;
  EXPECT_TRUE(contains(reason, "dma-buf: device 1 reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0"))
      << reason;
  EXPECT_TRUE(contains(reason, "peer-direct: the NIC 'sim' does not register device memory"))
      << reason;
  EXPECT_TRUE(contains(reason, "host shadow: the domain does not allow copies")) << reason;
  EXPECT_EQ(stats_of(domain.get()).registrations, 0u);
}

TEST(DeviceRegistration, ExportFailureFallsThroughToTheNextPath) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain("peer_direct=1");
  ASSERT_TRUE(domain);
  fake_cuda().set_failure("cuMemGetHandleForAddressRange", kCudaNotSupported);
  hmr_mr* mr = nullptr;
  const int rc = register_attr(domain.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr);
  auto only_dmabuf = open_domain(nullptr);
  hmr_mr* failed = nullptr;
  const int failed_rc =
      register_attr(only_dmabuf.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &failed);
  const std::string reason = hmr_last_error();
  fake_cuda().set_failure("cuMemGetHandleForAddressRange", 0);

  ASSERT_EQ(rc, 0);
  MrPtr owned(mr);
  EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_PEER_DIRECT);
  EXPECT_EQ(failed_rc, -HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(reason, "dma-buf: tried and failed: cuMemGetHandleForAddressRange"))
      << reason;
}

TEST(DeviceRegistration, DisableP2pGivesAHostShadowWhereCopiesAreAllowed) {
  FakeAllocation device(0, kAlloc);
  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  auto strict = open_domain("peer_direct=1");
  ASSERT_TRUE(strict);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(register_attr(strict.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr),
                   HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(hmr_last_error(), "FI_HMEM_DISABLE_P2P is set")) << hmr_last_error();

  auto copying = open_domain("peer_direct=1", HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(copying);
  const int exports = export_calls();
  MrPtr shadowed = register_ok(copying.get(), device.get(), 4096);
  ASSERT_TRUE(shadowed);
  const hmr_mr_info info = mr_info(shadowed.get());
  EXPECT_EQ(info.path, HMR_MR_PATH_HOST_SHADOW);
  EXPECT_NE(info.shadow, nullptr);
  EXPECT_EQ(info.cached, 1);  // shadows are cached too (device_cache_test.cpp)
  EXPECT_EQ(export_calls(), exports);  // P2P disabled: nothing exported
}

TEST(DeviceRegistration, ShadowStartsAsTheDeviceBytesAndSyncCopiesBothWays) {
  FakeAllocation device(0, kAlloc);
  const std::vector<uint8_t> initial = pattern(kAlloc, 1);
  ASSERT_EQ(fake_cuda().poke(device.address(), initial.data(), initial.size()), 0);
  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  auto domain = open_domain(nullptr, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  constexpr size_t kOffset = 4096;
  constexpr size_t kLen = 16384;
  MrPtr mr = register_ok(domain.get(), at(device.get(), kOffset), kLen);
  ASSERT_TRUE(mr);
  auto* shadow = static_cast<uint8_t*>(mr_info(mr.get()).shadow);
  ASSERT_NE(shadow, nullptr);
  EXPECT_EQ(std::memcmp(shadow, initial.data() + kOffset, kLen), 0);

  // The NIC (here: the CPU standing in for it) wrote the shadow; push it to the device.
  const std::vector<uint8_t> written = pattern(kLen, 90);
  std::memcpy(shadow, written.data(), kLen);
  ASSERT_HMR_OK(hmr_mr_sync(mr.get(), 0, 0, HMR_SYNC_TO_DEVICE));
  std::vector<uint8_t> seen(kLen);
  ASSERT_EQ(fake_cuda().peek(device.address() + kOffset, seen.data(), kLen), 0);
  EXPECT_EQ(seen, written);

  // The device changed part of it; pull only that part.
  const std::vector<uint8_t> changed = pattern(200, 200);
  ASSERT_EQ(fake_cuda().poke(device.address() + kOffset + 100, changed.data(), changed.size()), 0);
  ASSERT_HMR_OK(hmr_mr_sync(mr.get(), 100, 200, HMR_SYNC_FROM_DEVICE));
  EXPECT_EQ(std::memcmp(shadow + 100, changed.data(), 200), 0);
  EXPECT_EQ(std::memcmp(shadow, written.data(), 100), 0);
  EXPECT_EQ(std::memcmp(shadow + 300, written.data() + 300, kLen - 300), 0);
}

TEST(DeviceRegistration, PeerWritesLandInTheShadowAndReachTheDeviceAfterSync) {
  FakeAllocation device(0, kAlloc);
  ScopedEnv no_p2p("FI_HMEM_DISABLE_P2P", "1");
  auto target = open_domain(nullptr, HMR_DOMAIN_ALLOW_HMEM_COPY);
  auto initiator = open_domain(nullptr);
  ASSERT_TRUE(target && initiator);
  MrPtr mr = register_ok(target.get(), device.get(), 8192);
  ASSERT_TRUE(mr);
  uint64_t base = 0;
  uint8_t raw[16];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, reinterpret_cast<uintptr_t>(mr_info(mr.get()).shadow));

  hmr_test::Link link = hmr_test::connect(initiator.get(), target.get());
  ASSERT_TRUE(link);
  const std::vector<uint8_t> data = pattern(1000, 33);
  ASSERT_HMR_OK(hmr_ep_write(link.initiator.get(), data.data(), data.size(), nullptr, base + 500,
                             hmr_mr_key(mr.get())));
  ASSERT_HMR_OK(hmr_mr_sync(mr.get(), 500, data.size(), HMR_SYNC_TO_DEVICE));
  std::vector<uint8_t> seen(data.size());
  ASSERT_EQ(fake_cuda().peek(device.address() + 500, seen.data(), seen.size()), 0);
  EXPECT_EQ(seen, data);
}

TEST(DeviceRegistration, SimNicRecordsTheDmabufItWasGivenAndRefusesToMoveDeviceBytes) {
  FakeAllocation device(0, kAlloc);
  auto target = open_domain(nullptr);
  auto initiator = open_domain(nullptr);
  ASSERT_TRUE(target && initiator);
  MrPtr mr = register_ok(target.get(), at(device.get(), 8192), 300);
  ASSERT_TRUE(mr);
  const hmr_mr_info info = mr_info(mr.get());
  ASSERT_EQ(info.path, HMR_MR_PATH_DMABUF);
  hmr_test::Link link = hmr_test::connect(initiator.get(), target.get());
  ASSERT_TRUE(link);
  std::vector<uint8_t> data(16);
  EXPECT_HMR_ERROR(hmr_ep_write(link.initiator.get(), data.data(), data.size(), nullptr,
                                reinterpret_cast<uintptr_t>(device.get()) + 8192,
                                hmr_mr_key(mr.get())),
                   HMR_EOPNOTSUPP);
  const std::string expected = "dma-buf (fd " + std::to_string(info.dmabuf_fd) + ", offset " +
                               std::to_string(info.dmabuf_offset) + ", len 300)";
  EXPECT_TRUE(contains(hmr_last_error(), expected)) << hmr_last_error() << " vs " << expected;
  EXPECT_EQ(info.dmabuf_offset, 8192u);
}

TEST(DeviceRegistration, SyncOfAnMrTheNicReachesDirectlyHasNothingToCopy) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  MrPtr mr = register_ok(domain.get(), device.get(), 4096);
  ASSERT_TRUE(mr);
  const int copies = fake_cuda().call_count("cuMemcpyHtoD_v2");
  EXPECT_EQ(hmr_mr_sync(mr.get(), 0, 0, HMR_SYNC_TO_DEVICE), 0) << hmr_last_error();
  EXPECT_EQ(fake_cuda().call_count("cuMemcpyHtoD_v2"), copies);
}

// Process-wide fds (the userfaultfd monitor's) open with the first domain and stay: open one
// before counting.
void warm_up() { EXPECT_TRUE(open_domain(nullptr)); }

TEST(DeviceRegistration, OneExportIsSharedByRegistrationsInsideOneAllocation) {
  FakeAllocation device(0, kAlloc);
  warm_up();
  const int fds = open_fd_count();
  {
    auto domain = open_domain(nullptr);
    auto other = open_domain(nullptr);
    ASSERT_TRUE(domain && other);
    const int exports = export_calls();
    // Different ranges and access, and another domain: three NIC registrations, one export.
    MrPtr first = register_ok(domain.get(), device.get(), 4096);
    MrPtr second = register_ok(domain.get(), at(device.get(), 16384), 8192, HMR_HMEM_CUDA, 0,
                               HMR_REMOTE_READ);
    MrPtr third = register_ok(other.get(), at(device.get(), 32768), 100);
    ASSERT_TRUE(first && second && third);
    EXPECT_EQ(export_calls(), exports + 1);
    const hmr_mr_info a = mr_info(first.get());
    const hmr_mr_info b = mr_info(second.get());
    const hmr_mr_info c = mr_info(third.get());
    EXPECT_EQ(a.dmabuf_fd, b.dmabuf_fd);
    EXPECT_EQ(a.dmabuf_fd, c.dmabuf_fd);
    EXPECT_EQ(b.dmabuf_offset, 16384u);
    EXPECT_EQ(c.dmabuf_offset, 32768u);
    EXPECT_EQ(stats_of(domain.get()).nic_registrations, 2u);
    EXPECT_EQ(open_fd_count(), fds + 1);  // the one export
  }
  EXPECT_EQ(open_fd_count(), fds) << "the export must close with the last registration";
}

TEST(DeviceRegistration, NoFdLeaksAcrossPathsAndClose) {
  FakeAllocation device(0, kAlloc);
  FakeAllocation no_dmabuf(1, kAlloc);
  warm_up();
  const int fds = open_fd_count();
  for (int round = 0; round < 3; ++round) {
    auto domain = open_domain("peer_direct=1");
    ASSERT_TRUE(domain);
    MrPtr dmabuf = register_ok(domain.get(), device.get(), 4096);
    MrPtr peer = register_ok(domain.get(), no_dmabuf.get(), 4096);
    hmr_mem_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.field_mask = HMR_MEM_ATTR_DMABUF;
    ASSERT_HMR_OK(hmr_mem_query(device.get(), 4096, &attr));
    EXPECT_GE(attr.dmabuf_fd, 0);
    close(attr.dmabuf_fd);  // the caller's
  }
  EXPECT_EQ(open_fd_count(), fds);
}

TEST(DeviceRegistration, NeverTouchesDeviceMemoryInAllocatedAndMmuNotifyDomains) {
  FakeAllocation device(0, kAlloc);
  FakeAllocation no_dmabuf(1, kAlloc);
  const uint64_t mode = kSharingMode | HMR_MR_ALLOCATED | HMR_MR_MMU_NOTIFY;
  auto domain = open_domain("require=ALLOCATED|MMU_NOTIFY;peer_direct=1", 0, mode);
  ASSERT_TRUE(domain);
  MrPtr dmabuf = register_ok(domain.get(), device.get(), kAlloc);
  MrPtr peer = register_ok(domain.get(), no_dmabuf.get(), kAlloc);
  ASSERT_TRUE(dmabuf && peer);
  EXPECT_EQ(mr_info(dmabuf.get()).path, HMR_MR_PATH_DMABUF);
  EXPECT_EQ(mr_info(peer.get()).path, HMR_MR_PATH_PEER_DIRECT);
}

TEST(DeviceRegistration, DeviceMemoryIsOneSegmentPerMr) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  const iovec segments[2] = {{device.get(), 4096}, {at(device.get(), 8192), 4096}};
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_regv(domain.get(), segments, 2, kAccess, 0, 0, 0, &mr, nullptr),
                   HMR_EOPNOTSUPP);
  EXPECT_EQ(mr, nullptr);
}

TEST(DeviceRegistration, AsynchronousRegistrationOfDeviceMemoryCompletesOnTheQueue) {
  FakeAllocation device(0, kAlloc);
  auto domain = open_domain(nullptr);
  ASSERT_TRUE(domain);
  hmr_eq* eq = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, &eq));
  hmr_test::EqPtr queue(eq);
  ASSERT_HMR_OK(hmr_domain_bind(domain.get(), hmr_eq_fid(eq), HMR_REG_MR));
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(register_attr(domain.get(), device.get(), 4096, HMR_HMEM_SYSTEM, 0, 0, &mr));
  MrPtr owned(mr);
  uint32_t event = 0;
  hmr_eq_entry entry{};
  ASSERT_EQ(hmr_eq_sread(eq, &event, &entry, 5000, 0), 1) << hmr_last_error();
  EXPECT_EQ(event, static_cast<uint32_t>(HMR_MR_COMPLETE));
  EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_DMABUF);
  owned.reset();
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

}  // namespace
}  // namespace hmr_hmem_test
